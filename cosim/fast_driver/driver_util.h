// Shared pieces of tilewright's C++ fast drivers (main.cpp: GEMM core, accel_main.cpp:
// accelerator top): error exit, port access for every width Verilator may choose
// (CData/SData/IData/QData/VlWide, as little-endian uint32 chunks), reading uint32 words of a
// command stream and the stream markers they share. Include after "verilated.h", with TW_DRIVER_NAME defined (the executable's
// name, used in error messages).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "verilated.h"

#ifndef TW_DRIVER_NAME
#error "define TW_DRIVER_NAME before including driver_util.h"
#endif

namespace tw {

// Stream markers both drivers use: end of the command stream, start of a result record.
constexpr uint32_t MAGIC_END = 0x454E4F44u;     // "DONE"
constexpr uint32_t MAGIC_RESULT = 0x544C5352u;  // "RSLT"

// A message on stderr ("<driver>: msg (a, b)") and exit status ``code``.
[[noreturn]] inline void fail(int code, const char* msg, long a = -1, long b = -1) {
    std::fprintf(stderr, "%s: %s", TW_DRIVER_NAME, msg);
    if (a >= 0) std::fprintf(stderr, " (%ld", a);
    if (b >= 0) std::fprintf(stderr, ", %ld", b);
    if (a >= 0) std::fprintf(stderr, ")");
    std::fprintf(stderr, "\n");
    std::exit(code);
}

inline void put(CData& p, const uint32_t* w) { p = static_cast<CData>(w[0]); }
inline void put(SData& p, const uint32_t* w) { p = static_cast<SData>(w[0]); }
inline void put(IData& p, const uint32_t* w) { p = w[0]; }
inline void put(QData& p, const uint32_t* w) { p = w[0] | (static_cast<QData>(w[1]) << 32); }
template <std::size_t N>
void put(VlWide<N>& p, const uint32_t* w) {
    for (std::size_t i = 0; i < N; ++i) p.at(i) = w[i];
}
inline void get(const CData& p, uint32_t* w) { w[0] = p; }
inline void get(const SData& p, uint32_t* w) { w[0] = p; }
inline void get(const IData& p, uint32_t* w) { w[0] = p; }
inline void get(const QData& p, uint32_t* w) {
    w[0] = static_cast<uint32_t>(p);
    w[1] = static_cast<uint32_t>(p >> 32);
}
template <std::size_t N>
void get(const VlWide<N>& p, uint32_t* w) {
    for (std::size_t i = 0; i < N; ++i) w[i] = p.at(i);
}

// ``n`` uint32 words of the command stream, or exit 2 if it ends early.
inline void read_words(std::FILE* f, uint32_t* dst, std::size_t n) {
    if (n && std::fread(dst, sizeof(uint32_t), n, f) != n) fail(2, "command stream ended early");
}

// The command and result files of ``<driver> IN OUT`` ("-": stdin / stdout); exit 2 otherwise.
inline void open_streams(int argc, char** argv, std::FILE*& in, std::FILE*& out) {
    if (argc != 3) fail(2, "usage: " TW_DRIVER_NAME " IN OUT (files, or - for stdin/stdout)");
    in = std::strcmp(argv[1], "-") ? std::fopen(argv[1], "rb") : stdin;
    out = std::strcmp(argv[2], "-") ? std::fopen(argv[2], "wb") : stdout;
    if (!in) fail(2, "cannot open the command file");
    if (!out) fail(2, "cannot open the result file");
}

inline uint32_t read_u32(std::FILE* f) {
    uint32_t v;
    read_words(f, &v, 1);
    return v;
}

}  // namespace tw
