// tilewright fast driver: runs GEMM commands on the Verilated GEMM core (tw_gemm_core) from C++.
//
// Usage: tw_gemm_fast IN OUT      (IN / OUT: files, or "-" for stdin / stdout)
//
// Reads the binary command stream of cosim/gemm_commands.py (header, GEMM commands,
// end marker) and, for every command, writes the A and B buffers through the core's write ports,
// pulses start, waits for busy to fall, reads the accumulator back and writes one result record
// (flushed, so a host can stream commands one at a time through pipes).
//
// The port protocol is the cocotb bench's (cocotb_tests/gemm_core_bench.py), cycle for cycle:
// inputs change only while clk is low (the falling edge), one buffer word per cycle, accumulator
// data one cycle after its address. Cycles of a GEMM: rising edges from the one that samples start
// to the one after which busy is low — counted here, and read from the core's cycles register.
//
// Compile-time defines: TW_ROWS, TW_COLS (array size; checked against the stream header).
// Errors: a message on stderr and exit status 2 (bad stream) or 3 (protocol check failed).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "Vtw_gemm_core.h"
#include "verilated.h"

#define TW_DRIVER_NAME "tw_gemm_fast"
#include "driver_util.h"

#ifndef TW_ROWS
#error "define TW_ROWS and TW_COLS"
#endif

namespace {

using namespace tw;  // fail, put, get, read_words, read_u32, MAGIC_END/RESULT (driver_util.h)

constexpr uint32_t MAGIC_STREAM = 0x31475754u;  // "TWG1"
constexpr uint32_t MAGIC_GEMM = 0x4D4D4547u;    // "GEMM"
constexpr int A_CHUNKS = (8 * TW_ROWS + 31) / 32;  // uint32 chunks per A word
constexpr int B_CHUNKS = (8 * TW_COLS + 31) / 32;
constexpr int ACC_CHUNKS = TW_COLS;                // int32 lanes per accumulator word
#ifndef TW_ACC_READ_LATENCY
#define TW_ACC_READ_LATENCY 1                       // cycles from acc_rd_addr to acc_rd_data
#endif
#define ACC_READ_LATENCY TW_ACC_READ_LATENCY


class Driver {
  public:
    explicit Driver(VerilatedContext* ctx) : top_(new Vtw_gemm_core{ctx}) {}
    ~Driver() { top_->final(); }

    void reset() {
        top_->a_wr_en = top_->b_wr_en = top_->start = 0;
        top_->rst = 1;
        for (int i = 0; i < 3; ++i) tick();
        top_->rst = 0;
        tick();
    }

    // One full clock: rising edge (state updates), then falling edge (inputs may change after).
    void tick() {
        top_->clk = 1;
        top_->eval();
        top_->clk = 0;
        top_->eval();
    }

    void write_a(const std::vector<uint32_t>& words, uint32_t count) {
        write(top_->a_wr_en, top_->a_wr_addr, top_->a_wr_data, words, count, A_CHUNKS);
    }

    void write_b(const std::vector<uint32_t>& words, uint32_t count) {
        write(top_->b_wr_en, top_->b_wr_addr, top_->b_wr_data, words, count, B_CHUNKS);
    }

    // ``count`` words (``chunks`` uint32 each) through one buffer write port, from address 0.
    template <typename En, typename Addr, typename Data>
    void write(En& en, Addr& addr, Data& data, const std::vector<uint32_t>& words,
               uint32_t count, int chunks) {
        for (uint32_t i = 0; i < count; ++i) {
            en = 1;
            addr = i;
            put(data, &words[static_cast<std::size_t>(i) * chunks]);
            tick();
        }
        en = 0;
    }

    // Start one GEMM and run it to completion; returns the driver's cycle count.
    uint32_t run(uint32_t m, uint32_t k, uint32_t n) {
        top_->m = m;
        top_->k = k;
        top_->n = n;
        top_->start = 1;
        top_->clk = 1;  // the rising edge that samples start
        top_->eval();
        top_->clk = 0;
        top_->eval();
        top_->start = 0;
        if (!top_->busy) fail(3, "core did not go busy after start");
        uint32_t cycles = 0;
        while (top_->busy) {
            tick();
            ++cycles;
        }
        return cycles;
    }

    uint32_t counter() const { return top_->cycles; }

    // Words 0 .. count-1 of the accumulator: the data follows its address by
    // ACC_READ_LATENCY cycles (2 with pipeline.host_read, whose acc_rd_en is held high).
    void read_acc(std::vector<uint32_t>& out, uint32_t count) {
        out.assign(static_cast<std::size_t>(count) * ACC_CHUNKS, 0);
#if ACC_READ_LATENCY > 1
        top_->acc_rd_en = 1;
#endif
        top_->acc_rd_addr = 0;
        tick();
        for (uint32_t i = 1; i < ACC_READ_LATENCY; ++i) {
            top_->acc_rd_addr = (i < count) ? i : count - 1;
            tick();
        }
        for (uint32_t i = 0; i < count; ++i) {
            get(top_->acc_rd_data, &out[static_cast<std::size_t>(i) * ACC_CHUNKS]);
            top_->acc_rd_addr = (i + ACC_READ_LATENCY < count) ? i + ACC_READ_LATENCY : count - 1;
            tick();
        }
    }

  private:
    std::unique_ptr<Vtw_gemm_core> top_;
};


}  // namespace

int main(int argc, char** argv) {
    std::FILE *in, *out;
    open_streams(argc, argv, in, out);

    uint32_t head[3];
    read_words(in, head, 3);
    if (head[0] != MAGIC_STREAM) fail(2, "not a tilewright GEMM command stream (bad magic)");
    if (head[1] != TW_ROWS || head[2] != TW_COLS)
        fail(2, "stream is for another array size (rows, cols)", head[1], head[2]);

    auto ctx = std::make_unique<VerilatedContext>();
    Driver drv(ctx.get());
    drv.reset();
    std::vector<uint32_t> a, b, acc;
    for (;;) {
        const uint32_t magic = read_u32(in);
        if (magic == MAGIC_END) break;
        if (magic != MAGIC_GEMM) fail(2, "bad command magic", magic);
        uint32_t hdr[6];  // m, k, n, a_count, b_count, acc_count
        read_words(in, hdr, 6);
        if (hdr[5] == 0) fail(2, "command reads no accumulator words");
        a.resize(static_cast<std::size_t>(hdr[3]) * A_CHUNKS);
        b.resize(static_cast<std::size_t>(hdr[4]) * B_CHUNKS);
        read_words(in, a.data(), a.size());
        read_words(in, b.data(), b.size());
        drv.write_a(a, hdr[3]);
        drv.write_b(b, hdr[4]);
        const auto t0 = std::chrono::steady_clock::now();
        const uint32_t by_driver = drv.run(hdr[0], hdr[1], hdr[2]);
        const auto t1 = std::chrono::steady_clock::now();
        const uint32_t by_counter = drv.counter();
        drv.read_acc(acc, hdr[5]);
        if (by_counter != by_driver) fail(3, "cycle counter disagrees with driver count",
                                          by_counter, by_driver);
        const uint64_t ns = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
        const uint32_t rec[6] = {MAGIC_RESULT, by_counter, by_driver,
                                 static_cast<uint32_t>(ns), static_cast<uint32_t>(ns >> 32),
                                 hdr[5]};
        std::fwrite(rec, sizeof(uint32_t), 6, out);
        std::fwrite(acc.data(), sizeof(uint32_t), acc.size(), out);
        std::fflush(out);
    }
    if (out != stdout) std::fclose(out);
    return 0;
}
