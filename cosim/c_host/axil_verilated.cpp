// The bus of examples/c/tw_bus.h on the Verilated tw_axi_accel_top: each tw_read32/tw_write32
// is one AXI4-Lite transaction on s_axil, clocked cycle by cycle (valid held until ready, as the
// AXI rules say); tw_irq reads the irq pin. The memory port m_axi answers nothing: a Program that
// reaches for external memory stops the run with "FAIL m_axi". A response other than OKAY is a
// failure too. main() resets the top and calls the driver's tw_main().
#include <cstdio>
#include <cstdlib>

#include "Vtw_axi_accel_top.h"
#include "verilated.h"
#include "tw_bus.h"

static Vtw_axi_accel_top *top;
static unsigned long long cycles = 0;

static void tick() {
    top->clk = 1;
    top->eval();
    if (top->m_axi_arvalid || top->m_axi_awvalid || top->m_axi_wvalid) {
        std::fprintf(stderr, "FAIL m_axi: the Program reached for external memory\n");
        std::exit(3);
    }
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
    top->m_axi_awready = 0;
    top->m_axi_wready = 0;
    top->m_axi_bvalid = 0;
    top->m_axi_arready = 0;
    top->m_axi_rvalid = 0;
    top->rst = 1;
    for (int i = 0; i < 4; i++) tick();
    top->rst = 0;
    tick();
    int rc = tw_main(argc, argv);
    top->final();
    delete top;
    return rc;
}
