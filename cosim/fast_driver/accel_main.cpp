// tilewright fast driver of the programmable accelerator top (tw_accel): runs ISA segments on the
// Verilated top from C++, external memory included — no Python per cycle.
//
// Usage: tw_accel_fast IN OUT      (IN / OUT: files, or "-" for stdin / stdout)
//
// Binary stream (little-endian uint32 words; written by cosim/accel_commands.py):
//   header   "TWA1", W (bytes per beat), L (memory latency, cycles), n, then n instruction words
//            as (low, high) uint32 pairs
//   segment  "SEGM", entry, idx (the index register LOAD_VI reads; only a top with a vector
//            unit has it, others accept 0 only), watchdog cycles, n_store, n_store x (addr, CH
//            chunks of the W-byte word; CH = ceil(W / 4)), n_read, n_read x (addr, count)
//            ("SEGT": the same segment, its timeline recorded — see below)
//   end      "DONE"
// Result record per segment (flushed): "RSLT", cycles (counter), cycles (driver), retired, error,
// pc, read beats, write beats, busy ns (low, high), words, then words x CH chunks (the read-back
// ranges in order). After a "SEGT" segment's record: "TRCE", n, then n events (cycle, kind,
// value): kind 0 = an instruction issued in that cycle (value: its address, the pc), kinds 1/2/3
// = gemm_busy/dma_busy/vec_busy took level value in that cycle (transitions only; cycle 0 is the
// one that samples start, as the cycle counts; levels start low). Without SEGT nothing is
// recorded (the untraced run loop has no per-cycle recording).
//
// Protocol: the cocotb bench's (cocotb_tests/accel_bench.py), cycle for cycle. Reset (3 cycles),
// the instruction words through imem_wr_* one per cycle, then per segment: entry/start driven at a
// falling edge, cycles counted from the rising edge that samples start to the one after which busy
// is low, checked equal to the top's cycles register. External memory = ExtMemory.serve: always
// ready; a read request seen in cycle x returns beat j in cycle x + L + j (after earlier pending
// beats); write beats stored as they arrive. Outputs are sampled and inputs driven at the falling
// edge (memory model first samples, then every input change applies).
//
// One eval per cycle: the design (Amaranth, one rising-edge clock domain) has no falling-edge
// logic, so an eval at the falling edge changes no state and only recomputes, with unchanged
// inputs, the input-dependent combinational logic (Verilator's "ico" region: ~30% of the time on
// 16x16) that the rising-edge eval has already settled. The driver instead sets clk = 0 and
// records that level as the clock's previous value in the model's edge detector (Verilator 5's
// root member __Vtrigprevexpr___TOP__clk__0), so the next eval sees a rising edge. If a Verilator
// version lacks that member, or with -DTW_EVAL_FALLING_EDGE=1, the falling edge is evaluated as
// before (benchmarks/fast_driver_speed.py compares both; results are identical).
//
// Compile-time define: TW_BEAT_BYTES (W; checked against the stream header).
// Errors: a message on stderr and exit status 2 (bad stream) or 3 (protocol check failed).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "Vtw_accel.h"
#include "Vtw_accel___024root.h"
#include "verilated.h"

#define TW_DRIVER_NAME "tw_accel_fast"
#include "driver_util.h"

#ifndef TW_BEAT_BYTES
#error "define TW_BEAT_BYTES"
#endif
#ifndef TW_EVAL_FALLING_EDGE
#define TW_EVAL_FALLING_EDGE 0
#endif

namespace {

using namespace tw;  // fail, put, get, read_words, read_u32, MAGIC_END/RESULT (driver_util.h)

constexpr uint32_t MAGIC_STREAM = 0x31415754u;  // "TWA1"
constexpr uint32_t MAGIC_SEG = 0x4D474553u;     // "SEGM"
constexpr uint32_t MAGIC_SEG_TRACED = 0x54474553u;  // "SEGT"
constexpr uint32_t MAGIC_TRACE = 0x45435254u;   // "TRCE"
enum : uint32_t { EV_ISSUE = 0, EV_GEMM = 1, EV_DMA = 2, EV_VEC = 3 };
constexpr int CH = (TW_BEAT_BYTES + 3) / 4;     // uint32 chunks per external word

// Whether the model's root has Verilator 5's clock edge detector member (see the header comment).
template <typename R, typename = void>
struct HasClockEdgeMemory : std::false_type {};
template <typename R>
struct HasClockEdgeMemory<
    R, std::void_t<decltype(std::declval<R&>().__Vtrigprevexpr___TOP__clk__0)>> : std::true_type {};

// Whether the top has the index register input (tops with a vector unit: LOAD_VI).
template <typename T, typename = void>
struct HasIdx : std::false_type {};
template <typename T>
struct HasIdx<T, std::void_t<decltype(std::declval<T&>().idx)>> : std::true_type {};

template <typename T>
void set_idx(T& top, uint32_t idx) {
    if constexpr (HasIdx<T>::value)
        top.idx = idx;
    else if (idx != 0)
        fail(2, "this top has no index register (no vector unit): idx must be 0", idx);
}

// The falling clock edge (clk already 0): recorded in the edge detector, or evaluated.
template <typename R>
void fall(Vtw_accel& top, R& root) {
    if constexpr (HasClockEdgeMemory<R>::value && !TW_EVAL_FALLING_EDGE)
        root.__Vtrigprevexpr___TOP__clk__0 = 0;
    else
        top.eval();
}


// External memory: W-byte words as CH uint32 chunks, dense, growing on write; unwritten = 0.
class Memory {
  public:
    const uint32_t* word(uint64_t addr) const {
        static const uint32_t zero[CH] = {};
        return addr < size() ? &data_[addr * CH] : zero;
    }
    void store(uint64_t addr, const uint32_t* w) {
        if (addr >= size()) data_.resize((addr + 1 + addr / 2) * CH, 0);
        std::memcpy(&data_[addr * CH], w, sizeof(uint32_t) * CH);
    }

  private:
    uint64_t size() const { return data_.size() / CH; }
    std::vector<uint32_t> data_;
};

class Driver {
  public:
    Driver(VerilatedContext* ctx, uint32_t latency) : top_(new Vtw_accel{ctx}), lat_(latency) {}
    ~Driver() { top_->final(); }

    Memory mem;
    uint64_t reads = 0, writes = 0;  // beats served / stored

    void reset() {
        top_->imem_wr_en = top_->start = 0;
        top_->entry = 0;
        top_->rst = 1;
        for (int i = 0; i < 3; ++i) edge(false);
        top_->rst = 0;
        edge(false);
        // the memory model starts here (cocotb: started after reset)
        top_->mem_req_ready = top_->mem_wr_ready = 1;
        top_->mem_rd_valid = 0;
        serving_ = true;
    }

    void load_program(const std::vector<uint64_t>& words) {
        for (std::size_t i = 0; i < words.size(); ++i) {
            top_->imem_wr_en = 1;
            top_->imem_wr_addr = static_cast<uint32_t>(i);
            top_->imem_wr_data = words[i];
            edge(serving_);
        }
        top_->imem_wr_en = 0;
    }

    // Start at entry and run until busy falls; returns the driver's cycle count. Trace: record
    // the run's events (issues and busy transitions) into `events` (see the header comment).
    template <bool Trace>
    uint32_t run(uint32_t entry, uint32_t idx, uint64_t watchdog) {
        top_->entry = entry;
        set_idx(*top_, idx);
        top_->start = 1;
        edge(true);  // the rising edge that samples start, then the falling edge
        top_->start = 0;
        if (!top_->busy) fail(3, "controller did not go busy after start");
        uint64_t cycles = 0;
        if (Trace) start_trace();
        while (top_->busy) {
            edge(true);
            if (++cycles > watchdog) fail(3, "watchdog: busy still high after cycles", cycles);
            if (Trace) sample(static_cast<uint32_t>(cycles));
        }
        if (!top_->done) fail(3, "busy dropped without done");
        return static_cast<uint32_t>(cycles);
    }

    std::vector<uint32_t> events;  // (cycle, kind, value) triples of the last traced run

    uint32_t counter() const { return top_->cycles; }
    uint32_t retired() const { return top_->retired; }
    uint32_t error() const { return top_->error; }
    uint32_t pc() const { return top_->pc; }

  private:
    // The outputs settled after the start edge describe cycle 1 (the fetch): nothing issued yet.
    void start_trace() {
        events.clear();
        retired_ = top_->retired;
        pc_ = top_->pc;
        level_[0] = level_[1] = level_[2] = 0;
        levels(1);
    }

    // After the edge ending cycle n: the outputs describe cycle n + 1; a retired count that
    // moved means the instruction at the previous pc issued in cycle n.
    void sample(uint32_t n) {
        if (top_->retired != retired_) {
            events.insert(events.end(), {n, EV_ISSUE, pc_});
            retired_ = top_->retired;
        }
        pc_ = top_->pc;
        levels(n + 1);
    }

    void levels(uint32_t cycle) {
        const uint32_t now[3] = {top_->gemm_busy, top_->dma_busy, top_->vec_busy};
        for (int u = 0; u < 3; ++u)
            if (now[u] != level_[u]) {
                events.insert(events.end(), {cycle, EV_GEMM + u, now[u]});
                level_[u] = now[u];
            }
    }

    // One clock: rising edge, falling edge, then (while serving) the memory model's step, which
    // samples the outputs settled after the falling edge and drives the memory inputs.
    void edge(bool serve_mem) {
        top_->clk = 1;
        top_->eval();
        top_->clk = 0;
        fall(*top_, *top_->rootp);
        if (serve_mem) serve();
    }

    void serve() {
        ++cycle_;
        if (top_->mem_req_valid) {
            const uint64_t addr = top_->mem_req_addr, n = top_->mem_req_len;
            if (top_->mem_req_write) {
                wr_addr_ = static_cast<int64_t>(addr);
            } else {
                uint64_t due = cycle_ + lat_;
                if (!pending_.empty() && pending_.back().first + 1 > due)
                    due = pending_.back().first + 1;
                for (uint64_t j = 0; j < n; ++j) pending_.emplace_back(due + j, addr + j);
            }
        }
        if (top_->mem_wr_valid) {
            if (wr_addr_ < 0) fail(3, "write beat without a write request");
            uint32_t w[CH > 1 ? CH : 1] = {};
            get(top_->mem_wr_data, w);
            mem.store(static_cast<uint64_t>(wr_addr_), w);
            ++wr_addr_;
            ++writes;
        }
        if (!pending_.empty() && pending_.front().first == cycle_) {
            if (!top_->mem_rd_ready) fail(3, "DMA not ready for a read beat");
            const uint64_t addr = pending_.front().second;
            pending_.pop_front();
            put(top_->mem_rd_data, mem.word(addr));
            top_->mem_rd_valid = 1;
            ++reads;
        } else {
            top_->mem_rd_valid = 0;
        }
    }

    std::unique_ptr<Vtw_accel> top_;
    uint64_t lat_;
    bool serving_ = false;
    uint64_t cycle_ = 0;
    int64_t wr_addr_ = -1;
    uint32_t retired_ = 0, pc_ = 0, level_[3] = {};  // the trace's last seen values
    std::deque<std::pair<uint64_t, uint64_t>> pending_;  // (cycle due, address) of read beats
};


}  // namespace

int main(int argc, char** argv) {
    std::FILE *in, *out;
    open_streams(argc, argv, in, out);

    uint32_t head[4];
    read_words(in, head, 4);
    if (head[0] != MAGIC_STREAM) fail(2, "not a tilewright accelerator stream (bad magic)");
    if (head[1] != TW_BEAT_BYTES) fail(2, "stream is for another beat width (W)", head[1]);
    if (head[2] < 1) fail(2, "memory latency must be at least 1 cycle");
    std::vector<uint32_t> raw(static_cast<std::size_t>(head[3]) * 2);
    read_words(in, raw.data(), raw.size());
    std::vector<uint64_t> program(head[3]);
    for (std::size_t i = 0; i < program.size(); ++i)
        program[i] = raw[2 * i] | (static_cast<uint64_t>(raw[2 * i + 1]) << 32);

    auto ctx = std::make_unique<VerilatedContext>();
    Driver drv(ctx.get(), head[2]);
    drv.reset();
    drv.load_program(program);
    std::vector<uint32_t> buf, back;
    for (;;) {
        const uint32_t magic = read_u32(in);
        if (magic == MAGIC_END) break;
        if (magic != MAGIC_SEG && magic != MAGIC_SEG_TRACED) fail(2, "bad command magic", magic);
        const bool traced = magic == MAGIC_SEG_TRACED;
        uint32_t hdr[4];  // entry, idx, watchdog, n_store
        read_words(in, hdr, 4);
        buf.resize(static_cast<std::size_t>(hdr[3]) * (1 + CH));
        read_words(in, buf.data(), buf.size());
        for (uint32_t i = 0; i < hdr[3]; ++i) {
            const uint32_t* rec = &buf[static_cast<std::size_t>(i) * (1 + CH)];
            drv.mem.store(rec[0], rec + 1);
        }
        const uint32_t n_read = read_u32(in);
        std::vector<uint32_t> ranges(static_cast<std::size_t>(n_read) * 2);
        read_words(in, ranges.data(), ranges.size());

        const uint64_t r0 = drv.reads, w0 = drv.writes;
        const auto t0 = std::chrono::steady_clock::now();
        const uint32_t by_driver = traced ? drv.run<true>(hdr[0], hdr[1], hdr[2])
                                          : drv.run<false>(hdr[0], hdr[1], hdr[2]);
        const auto t1 = std::chrono::steady_clock::now();
        const uint32_t by_counter = drv.counter();
        if (by_counter != by_driver)
            fail(3, "cycle counter disagrees with driver count", by_counter, by_driver);

        back.clear();
        for (uint32_t r = 0; r < n_read; ++r)
            for (uint32_t j = 0; j < ranges[2 * r + 1]; ++j) {
                const uint32_t* w = drv.mem.word(static_cast<uint64_t>(ranges[2 * r]) + j);
                back.insert(back.end(), w, w + CH);
            }
        const uint64_t ns = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
        const uint32_t rec[11] = {MAGIC_RESULT, by_counter, by_driver, drv.retired(), drv.error(),
                                  drv.pc(), static_cast<uint32_t>(drv.reads - r0),
                                  static_cast<uint32_t>(drv.writes - w0),
                                  static_cast<uint32_t>(ns), static_cast<uint32_t>(ns >> 32),
                                  static_cast<uint32_t>(back.size() / CH)};
        std::fwrite(rec, sizeof(uint32_t), 11, out);
        std::fwrite(back.data(), sizeof(uint32_t), back.size(), out);
        if (traced) {
            const uint32_t head[2] = {MAGIC_TRACE, static_cast<uint32_t>(drv.events.size() / 3)};
            std::fwrite(head, sizeof(uint32_t), 2, out);
            std::fwrite(drv.events.data(), sizeof(uint32_t), drv.events.size(), out);
        }
        std::fflush(out);
    }
    if (out != stdout) std::fclose(out);
    return 0;
}
