/*
 * Generators for the code that repeats per payload element, per pair of
 * elements (a Tofino pair register) and per worker. Nothing in the programs
 * is written out K times by hand: it is written once as a macro M and
 * expanded here.
 *
 * Element i is named by its index in two hexadecimal digits: e00, e01, ...,
 * e3f for K = 64. INAGG_FOR_EACH_ELEMENT(M) expands to
 *     M(00) M(01) ... M(3f)
 * and INAGG_FOR_EACH_PAIR(M) to M(even, odd) for each pair of neighbours:
 *     M(00, 01) M(02, 03) ... M(3e, 3f)
 * so that M can paste the digits into names (e##n, acc_##n, pair_##a).
 * The digits are only ever pasted, never used as numbers: `1e` is a valid
 * preprocessing token but not a P4 literal.
 *
 * The count comes from INAGG_K (common/config.p4), a multiple of 8: blocks
 * of 8 elements (the low or high half of one hex digit's 16) are chained up
 * to K.
 */
#ifndef _INAGG_ELEMENTS_P4_
#define _INAGG_ELEMENTS_P4_

#define INAGG_CAT(a, b) a##b
#define INAGG_XCAT(a, b) INAGG_CAT(a, b)

/* 8 elements: h0..h7 or h8..hf. */
#define INAGG_ELEMENTS_LO(M, h) M(h##0) M(h##1) M(h##2) M(h##3) M(h##4) M(h##5) M(h##6) M(h##7)
#define INAGG_ELEMENTS_HI(M, h) M(h##8) M(h##9) M(h##a) M(h##b) M(h##c) M(h##d) M(h##e) M(h##f)

/* The same 8 elements as 4 pairs. */
#define INAGG_PAIRS_LO(M, h) M(h##0, h##1) M(h##2, h##3) M(h##4, h##5) M(h##6, h##7)
#define INAGG_PAIRS_HI(M, h) M(h##8, h##9) M(h##a, h##b) M(h##c, h##d) M(h##e, h##f)

/* The first N elements, N a multiple of 8, with X = INAGG_ELEMENTS or
 * INAGG_PAIRS choosing what one block expands to. */
#define INAGG_BLOCKS_8(X, M)                         X##_LO(M, 0)
#define INAGG_BLOCKS_16(X, M)  INAGG_BLOCKS_8(X, M)   X##_HI(M, 0)
#define INAGG_BLOCKS_24(X, M)  INAGG_BLOCKS_16(X, M)  X##_LO(M, 1)
#define INAGG_BLOCKS_32(X, M)  INAGG_BLOCKS_24(X, M)  X##_HI(M, 1)
#define INAGG_BLOCKS_40(X, M)  INAGG_BLOCKS_32(X, M)  X##_LO(M, 2)
#define INAGG_BLOCKS_48(X, M)  INAGG_BLOCKS_40(X, M)  X##_HI(M, 2)
#define INAGG_BLOCKS_56(X, M)  INAGG_BLOCKS_48(X, M)  X##_LO(M, 3)
#define INAGG_BLOCKS_64(X, M)  INAGG_BLOCKS_56(X, M)  X##_HI(M, 3)
#define INAGG_BLOCKS_72(X, M)  INAGG_BLOCKS_64(X, M)  X##_LO(M, 4)
#define INAGG_BLOCKS_80(X, M)  INAGG_BLOCKS_72(X, M)  X##_HI(M, 4)
#define INAGG_BLOCKS_88(X, M)  INAGG_BLOCKS_80(X, M)  X##_LO(M, 5)
#define INAGG_BLOCKS_96(X, M)  INAGG_BLOCKS_88(X, M)  X##_HI(M, 5)
#define INAGG_BLOCKS_104(X, M) INAGG_BLOCKS_96(X, M)  X##_LO(M, 6)
#define INAGG_BLOCKS_112(X, M) INAGG_BLOCKS_104(X, M) X##_HI(M, 6)
#define INAGG_BLOCKS_120(X, M) INAGG_BLOCKS_112(X, M) X##_LO(M, 7)
#define INAGG_BLOCKS_128(X, M) INAGG_BLOCKS_120(X, M) X##_HI(M, 7)
#define INAGG_BLOCKS_136(X, M) INAGG_BLOCKS_128(X, M) X##_LO(M, 8)
#define INAGG_BLOCKS_144(X, M) INAGG_BLOCKS_136(X, M) X##_HI(M, 8)
#define INAGG_BLOCKS_152(X, M) INAGG_BLOCKS_144(X, M) X##_LO(M, 9)
#define INAGG_BLOCKS_160(X, M) INAGG_BLOCKS_152(X, M) X##_HI(M, 9)
#define INAGG_BLOCKS_168(X, M) INAGG_BLOCKS_160(X, M) X##_LO(M, a)
#define INAGG_BLOCKS_176(X, M) INAGG_BLOCKS_168(X, M) X##_HI(M, a)
#define INAGG_BLOCKS_184(X, M) INAGG_BLOCKS_176(X, M) X##_LO(M, b)
#define INAGG_BLOCKS_192(X, M) INAGG_BLOCKS_184(X, M) X##_HI(M, b)
#define INAGG_BLOCKS_200(X, M) INAGG_BLOCKS_192(X, M) X##_LO(M, c)
#define INAGG_BLOCKS_208(X, M) INAGG_BLOCKS_200(X, M) X##_HI(M, c)
#define INAGG_BLOCKS_216(X, M) INAGG_BLOCKS_208(X, M) X##_LO(M, d)
#define INAGG_BLOCKS_224(X, M) INAGG_BLOCKS_216(X, M) X##_HI(M, d)
#define INAGG_BLOCKS_232(X, M) INAGG_BLOCKS_224(X, M) X##_LO(M, e)
#define INAGG_BLOCKS_240(X, M) INAGG_BLOCKS_232(X, M) X##_HI(M, e)
#define INAGG_BLOCKS_248(X, M) INAGG_BLOCKS_240(X, M) X##_LO(M, f)
#define INAGG_BLOCKS_256(X, M) INAGG_BLOCKS_248(X, M) X##_HI(M, f)

#define INAGG_FOR_EACH_ELEMENT(M) INAGG_XCAT(INAGG_BLOCKS_, INAGG_K)(INAGG_ELEMENTS, M)
#define INAGG_FOR_EACH_PAIR(M)    INAGG_XCAT(INAGG_BLOCKS_, INAGG_K)(INAGG_PAIRS, M)

/* At K = 64, the pairs of elements 00..0f and of 10..3f (the TNA program's
 * two value passes on Tofino 1, p4/tna/accumulators.p4). */
#define INAGG_PAIRS_FIRST_HALF_64(M)  INAGG_BLOCKS_16(INAGG_PAIRS, M)
#define INAGG_PAIRS_SECOND_HALF_64(M) \
    INAGG_PAIRS_LO(M, 1) INAGG_PAIRS_HI(M, 1) INAGG_PAIRS_LO(M, 2) INAGG_PAIRS_HI(M, 2) \
    INAGG_PAIRS_LO(M, 3) INAGG_PAIRS_HI(M, 3)

/* Worker ids 0..63, in the two halves of a 64-bit bitmap (the TNA program
 * keeps each half in its own pair register). These expand to numbers. */
#define INAGG_WORKERS_0_31(M) \
    M(0)  M(1)  M(2)  M(3)  M(4)  M(5)  M(6)  M(7)  M(8)  M(9)  M(10) M(11) M(12) M(13) M(14) M(15) \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)
#define INAGG_WORKERS_32_63(M) \
    M(32) M(33) M(34) M(35) M(36) M(37) M(38) M(39) M(40) M(41) M(42) M(43) M(44) M(45) M(46) M(47) \
    M(48) M(49) M(50) M(51) M(52) M(53) M(54) M(55) M(56) M(57) M(58) M(59) M(60) M(61) M(62) M(63)

#endif /* _INAGG_ELEMENTS_P4_ */
