// The bus of examples/c/tw_bus.h on the Verilated tw_axi_accel_top: each tw_read32/tw_write32
// is one AXI4-Lite transaction on s_axil, clocked cycle by cycle (valid held until ready, as the
// AXI rules say); tw_irq reads the irq pin. The memory port m_axi is served by an AXI4
// subordinate memory (tw_mem_write/tw_mem_read copy bytes in and out between runs) with the
// timing of tilewright.rtl.uart_bridge_top.BridgeRam and cocotbext-axi's AxiRam: AR taken while
// no burst is read (or with the last beat of one), the first R beat 2 cycles after the AR
// handshake, one beat per cycle while RREADY; AW taken while no write burst is open (or with its
// last W beat), W from the AW cycle on; one B per burst. So the DMA sees a read latency of 3
// cycles and CYCLES follows the cycle model at that latency. A response other than OKAY is a
// failure. main() resets the top and calls the driver's tw_main().
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "Vtw_axi_accel_top.h"
#include "verilated.h"
#include "tw_bus.h"

static Vtw_axi_accel_top *top;
static unsigned long long cycles = 0;

// ---- the AXI4 subordinate memory on m_axi (W-byte beats, byte addresses) --------------------
static const unsigned W = sizeof(top->m_axi_wdata);   // bytes per beat: the port's width
static std::vector<unsigned char> mem;               // grows on demand; unwritten bytes read 0
static bool r_active = false, w_active = false, rvalid = false, rlast = false;
static unsigned long long r_addr = 0, w_addr = 0;    // byte addresses of the next beat
static unsigned r_left = 0, b_count = 0;
static unsigned char rbeat[128];

static void mem_span(unsigned long long addr, size_t n) {
    if (addr + n > mem.size()) mem.resize(addr + n, 0);
}

extern "C" void tw_mem_write(uint64_t addr, const void *src, size_t n) {
    mem_span(addr, n);
    std::memcpy(mem.data() + addr, src, n);
}

extern "C" void tw_mem_read(uint64_t addr, void *dst, size_t n) {
    mem_span(addr, n);
    std::memcpy(dst, mem.data() + addr, n);
}

// before the rising edge: the readies from the state and the top's valids, then the handshakes
struct Fires { bool ar, r, aw, w, b, wlast, issue, advance; };

static Fires axi_pre_edge() {
    top->eval();
    Fires f{};
    f.advance = !rvalid || top->m_axi_rready;
    f.issue = r_active && f.advance;
    top->m_axi_arready = !r_active || (f.issue && r_left == 1);
    top->m_axi_wready = w_active || top->m_axi_awvalid;
    top->eval();
    f.w = top->m_axi_wvalid && top->m_axi_wready;
    f.wlast = f.w && top->m_axi_wlast;
    top->m_axi_awready = !w_active || f.wlast;
    top->m_axi_bvalid = b_count != 0;
    top->m_axi_bresp = 0;
    top->m_axi_bid = 0;
    top->eval();
    f.ar = top->m_axi_arvalid && top->m_axi_arready;
    f.r = rvalid && top->m_axi_rready;
    f.aw = top->m_axi_awvalid && top->m_axi_awready;
    f.b = top->m_axi_bvalid && top->m_axi_bready;
    return f;
}

// at the rising edge: the memory's registers take their next values
static void axi_edge(const Fires &f, unsigned long long araddr, unsigned arlen,
                     unsigned long long awaddr, const unsigned char *wdata) {
    if (f.advance) {
        rvalid = f.issue;
        rlast = f.issue && r_left == 1;
        if (f.issue) tw_mem_read(r_addr, rbeat, W);
    }
    if (f.issue) {
        r_addr += W;
        if (--r_left == 0) r_active = false;
    }
    if (f.ar) { r_active = true; r_addr = araddr; r_left = arlen + 1; }
    bool was_open = w_active;
    unsigned long long cur = was_open ? w_addr : awaddr;   // this beat's burst
    if (f.w) {
        tw_mem_write(cur, wdata, W);
        w_addr = cur + W;
        if (f.wlast) { w_active = false; b_count++; }
    }
    if (f.aw && !(f.wlast && !was_open)) w_active = true;   // the new burst stays open
    if (f.aw && !(f.w && !was_open)) w_addr = awaddr;        // its first beat is still to come
    if (f.b) b_count--;
}

static void axi_post_edge() {
    top->m_axi_rvalid = rvalid;
    top->m_axi_rlast = rlast;
    top->m_axi_rresp = 0;
    top->m_axi_rid = 0;
    std::memcpy(&top->m_axi_rdata, rbeat, W);
}

static void tick() {
    Fires f = axi_pre_edge();
    unsigned long long araddr = top->m_axi_araddr, awaddr = top->m_axi_awaddr;
    unsigned arlen = top->m_axi_arlen;
    unsigned char wdata[128];
    std::memcpy(wdata, &top->m_axi_wdata, W);
    top->clk = 1;
    top->eval();
    axi_edge(f, araddr, arlen, awaddr, wdata);
    axi_post_edge();
    top->clk = 0;
    top->eval();
    if (++cycles > 200000000ULL) {
        std::fprintf(stderr, "FAIL bus: no response after %llu cycles\n", cycles);
        std::exit(3);
    }
}

extern "C" uint32_t tw_read32(uint32_t addr) {
    top->s_axil_araddr = addr;
    top->s_axil_arprot = 0;
    top->s_axil_arvalid = 1;
    for (;;) {
        top->eval();
        bool done = top->s_axil_arready;
        tick();
        if (done) break;
    }
    top->s_axil_arvalid = 0;
    top->s_axil_rready = 1;
    uint32_t data = 0;
    for (;;) {
        top->eval();
        bool done = top->s_axil_rvalid;
        data = top->s_axil_rdata;
        unsigned resp = top->s_axil_rresp;
        tick();
        if (done) {
            if (resp != 0) {
                std::fprintf(stderr, "FAIL bus: read 0x%04x answered %u\n", addr, resp);
                std::exit(3);
            }
            break;
        }
    }
    top->s_axil_rready = 0;
    return data;
}

extern "C" void tw_write32(uint32_t addr, uint32_t data) {
    top->s_axil_awaddr = addr;
    top->s_axil_awprot = 0;
    top->s_axil_awvalid = 1;
    top->s_axil_wdata = data;
    top->s_axil_wstrb = 0xF;
    top->s_axil_wvalid = 1;
    while (top->s_axil_awvalid || top->s_axil_wvalid) {
        top->eval();
        bool aw = top->s_axil_awvalid && top->s_axil_awready;
        bool w = top->s_axil_wvalid && top->s_axil_wready;
        tick();
        if (aw) top->s_axil_awvalid = 0;
        if (w) top->s_axil_wvalid = 0;
    }
    top->s_axil_bready = 1;
    for (;;) {
        top->eval();
        bool done = top->s_axil_bvalid;
        unsigned resp = top->s_axil_bresp;
        tick();
        if (done) {
            if (resp != 0) {
                std::fprintf(stderr, "FAIL bus: write 0x%04x answered %u\n", addr, resp);
                std::exit(3);
            }
            break;
        }
    }
    top->s_axil_bready = 0;
}

extern "C" int tw_irq(void) {
    top->eval();
    return top->irq ? 1 : 0;
}

int main(int argc, char **argv) {
    Verilated::commandArgs(argc, argv);
    top = new Vtw_axi_accel_top;
    axi_post_edge();
    top->rst = 1;
    for (int i = 0; i < 4; i++) tick();
    top->rst = 0;
    tick();
    int rc = tw_main(argc, argv);
    top->final();
    delete top;
    return rc;
}
