/* A C driver of the tilewright programmable accelerator, written against the register map's
 * generated C header (tw_axi_accel_top.h, from `tilewright rtl --top axi-accel -o DIR`) only:
 * every address is offsetof() of the header's register block, every bit a field macro.
 *
 * It checks the identification registers against the reset values the header declares, loads a
 * Program (64-bit instruction words as hex, one per line, on stdin) into the instruction-memory
 * window, enables the interrupt, starts the Program at ENTRY 0, waits for STATUS.DONE and irq,
 * prints "CYCLES <n> RETIRED <n>", clears DONE by writing 1 to it and checks irq drops.
 * Exit status 0 when every check passed; each failed check prints one line on stderr. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "tw_axi_accel_top.h"
#include "tw_bus.h"

#define REG(name) ((uint32_t)offsetof(tw_axi_accel_top_t, name))
#define FIELD(value, reg, field) \
    (((value) & TW_AXI_ACCEL_TOP__##reg##__##field##_bm) >> TW_AXI_ACCEL_TOP__##reg##__##field##_bp)
#define BIT(reg, field) TW_AXI_ACCEL_TOP__##reg##__##field##_bm

static int failures = 0;

static void expect(const char *what, uint32_t got, uint32_t want) {
    if (got != want) {
        fprintf(stderr, "FAIL %s: read 0x%08x, expected 0x%08x\n", what, got, want);
        failures++;
    }
}

int tw_main(int argc, char **argv) {
    (void)argc; (void)argv;
    /* identification: what the header says this build holds */
    expect("ID", tw_read32(REG(ID)), TW_AXI_ACCEL_TOP__ID__VALUE_reset);
    uint32_t config = tw_read32(REG(CONFIG));
    expect("CONFIG.ROWS", FIELD(config, CONFIG, ROWS), TW_AXI_ACCEL_TOP__CONFIG__ROWS_reset);
    expect("CONFIG.COLS", FIELD(config, CONFIG, COLS), TW_AXI_ACCEL_TOP__CONFIG__COLS_reset);
    expect("CONFIG.DATAFLOW", FIELD(config, CONFIG, DATAFLOW),
           TW_AXI_ACCEL_TOP__CONFIG__DATAFLOW_reset);
    expect("CONFIG.DATA_BYTES", FIELD(config, CONFIG, DATA_BYTES),
           TW_AXI_ACCEL_TOP__CONFIG__DATA_BYTES_reset);
    uint32_t version = tw_read32(REG(VERSION));
    expect("VERSION.TOP", FIELD(version, VERSION, TOP), TW_AXI_ACCEL_TOP__VERSION__TOP_reset);
    uint32_t imem_words = tw_read32(REG(IMEM_WORDS));
    expect("IMEM_WORDS", imem_words, TW_AXI_ACCEL_TOP__IMEM_WORDS__VALUE_reset);

    /* the Program: low half of each 64-bit word first */
    unsigned long long word;
    uint32_t n = 0;
    while (scanf("%llx", &word) == 1) {
        if (n >= imem_words) {
            fprintf(stderr, "FAIL Program longer than IMEM_WORDS = %u\n", imem_words);
            return 1;
        }
        tw_write32(REG(IMEM) + 8u * n, (uint32_t)word);
        tw_write32(REG(IMEM) + 8u * n + 4u, (uint32_t)(word >> 32));
        n++;
    }
    tw_write32(REG(ENTRY), 0);
    tw_write32(REG(IRQ_EN), BIT(IRQ_EN, DONE));
    tw_write32(REG(CTRL), BIT(CTRL, START));
    uint32_t status = 0;
    for (long spin = 0; !(status & BIT(STATUS, DONE)); spin++) {
        if (spin > 10000000) {
            fprintf(stderr, "FAIL STATUS.DONE never rose (STATUS 0x%08x)\n", status);
            return 1;
        }
        status = tw_read32(REG(STATUS));
    }
    expect("STATUS.BUSY after DONE", FIELD(status, STATUS, BUSY), 0);
    expect("STATUS.ERROR", FIELD(status, STATUS, ERROR), 0);
    expect("STATUS.BUS_ERROR", FIELD(status, STATUS, BUS_ERROR), 0);
    expect("irq with IRQ_EN.DONE and STATUS.DONE", (uint32_t)tw_irq(), 1);
    printf("CYCLES %u RETIRED %u\n", tw_read32(REG(CYCLES)), tw_read32(REG(RETIRED)));
    tw_write32(REG(STATUS), BIT(STATUS, DONE)); /* write 1 to clear */
    expect("STATUS.DONE after W1C", FIELD(tw_read32(REG(STATUS)), STATUS, DONE), 0);
    expect("irq after W1C", (uint32_t)tw_irq(), 0);
    return failures ? 1 : 0;
}
