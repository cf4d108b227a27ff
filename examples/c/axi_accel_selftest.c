/* A C driver of the tilewright programmable accelerator, written against the register map's
 * generated C header (tw_axi_accel_top.h, from `tilewright rtl --top axi-accel -o DIR`) only:
 * every address is offsetof() of the header's register block, every bit a field macro.
 *
 * It checks the identification registers against the reset values the header declares, loads a
 * Program (64-bit instruction words as hex, one per line, on stdin) into the instruction-memory
 * window, then follows the directives after the words, in order:
 *   MEM <byte address, hex> <bytes, hex, lowest address first>   write external memory
 *   RUN <entry>     start at ENTRY <entry>, wait for STATUS.DONE and irq, print
 *                   "CYCLES <n> RETIRED <n>", clear DONE by writing 1 to it, check irq drops
 *   READ <byte address, hex> <count>   print "MEM <address> <bytes, hex>" from external memory
 * With no directive at all it runs the Program once at ENTRY 0.
 * Exit status 0 when every check passed; each failed check prints one line on stderr. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define MAX_BYTES 256

/* START at `entry`, wait for DONE, print CYCLES and RETIRED, clear DONE; nonzero on a hang */
static int run_at(uint32_t entry) {
    tw_write32(REG(ENTRY), entry);
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
    return 0;
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
    char op[16];
    int runs = 0, directives = 0;
    while (scanf("%15s", op) == 1) {
        directives++;
        if (strcmp(op, "RUN") == 0) {
            unsigned entry;
            if (scanf("%u", &entry) != 1 || run_at(entry) != 0) return 1;
            runs++;
        } else if (strcmp(op, "MEM") == 0 || strcmp(op, "READ") == 0) {
            unsigned long long addr;
            char hex[2 * MAX_BYTES + 1];
            unsigned char bytes[MAX_BYTES];
            unsigned count = 0;
            if (strcmp(op, "MEM") == 0) {
                if (scanf("%llx %512s", &addr, hex) != 2 || strlen(hex) % 2) goto bad;
                count = (unsigned)strlen(hex) / 2;
                for (unsigned i = 0; i < count; i++)
                    if (sscanf(hex + 2 * i, "%2hhx", &bytes[i]) != 1) goto bad;
                tw_mem_write(addr, bytes, count);
            } else {
                if (scanf("%llx %u", &addr, &count) != 2 || count > MAX_BYTES) goto bad;
                tw_mem_read(addr, bytes, count);
                printf("MEM %llx ", addr);
                for (unsigned i = 0; i < count; i++) printf("%02x", bytes[i]);
                printf("\n");
            }
        } else {
            goto bad;
        }
        continue;
    bad:
        fprintf(stderr, "FAIL directive %s: accepted MEM <hex addr> <hex bytes, at most %d>, "
                "RUN <entry>, READ <hex addr> <count <= %d>\n", op, MAX_BYTES, MAX_BYTES);
        return 1;
    }
    if (directives == 0 && run_at(0) != 0) return 1;
    (void)runs;
    return failures ? 1 : 0;
}
