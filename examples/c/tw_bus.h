/* The bus a driver of the tilewright accelerator talks through: 32-bit reads and writes on the
 * AXI4-Lite control port (byte addresses relative to the accelerator's base) and the irq line.
 * On a board these are volatile loads/stores at the base address; in the suite they are
 * implemented on the Verilated top (tilewright/cosim/c_host/axil_verilated.cpp). */
#ifndef TW_BUS_H
#define TW_BUS_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
uint32_t tw_read32(uint32_t addr);
void tw_write32(uint32_t addr, uint32_t data);
int tw_irq(void);
/* the driver's entry point (the host shim's main calls it) */
int tw_main(int argc, char **argv);
#ifdef __cplusplus
}
#endif
#endif
