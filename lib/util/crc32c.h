/* crc32c.h: CRC-32C (Castagnoli) of frames and log records. */
/* SPDX-License-Identifier: MIT */
#ifndef FTCC_CRC32C_H
#define FTCC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/*
 * CRC-32C (reflected polynomial 0x82F63B78, initial value ~0, final xor ~0)
 * of len bytes at buf, continuing from crc: pass 0 to start, and a previous
 * result to extend it, so crc(crc(0, a), b) == crc(0, a || b).
 * ft__crc32c(0, "123456789", 9) == 0xE3069283. Uses the SSE4.2 crc32
 * instruction when the CPU has it, else ft__crc32c_sw. Thread-safe.
 */
uint32_t ft__crc32c(uint32_t crc, const void *buf, size_t len);

/* The same CRC, always computed with the portable slice-by-8 tables. */
uint32_t ft__crc32c_sw(uint32_t crc, const void *buf, size_t len);

#endif /* FTCC_CRC32C_H */
