/* The bus a driver of the tilewright accelerator talks through: 32-bit reads and writes on the
 * AXI4-Lite control port (byte addresses relative to the accelerator's base), the irq line, and
 * byte copies into and out of the memory the accelerator's AXI4 manager port reaches (byte
 * addresses as the accelerator issues them: word address x W bytes per beat). On a board these
 * are volatile loads/stores at the base address and memcpy into the shared memory; in the suite
 * they are implemented on the Verilated top (tilewright/cosim/c_host/axil_verilated.cpp). */
#ifndef TW_BUS_H
#define TW_BUS_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
uint32_t tw_read32(uint32_t addr);
void tw_write32(uint32_t addr, uint32_t data);
int tw_irq(void);
void tw_mem_write(uint64_t addr, const void *src, size_t n);
void tw_mem_read(uint64_t addr, void *dst, size_t n);
/* the driver's entry point (the host shim's main calls it) */
int tw_main(int argc, char **argv);
#ifdef __cplusplus
}
#endif
#endif
