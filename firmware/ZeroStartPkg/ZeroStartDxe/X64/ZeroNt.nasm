;------------------------------------------------------------------------------
; ZeroStartDxe: zero memory with non-temporal stores.
;
; The firmware's C is built without SSE, and a scrub of GiBs must not pull
; the zeroed lines through the caches, so this is a movnti loop: 64 bytes
; (one cache line) per iteration with 8-byte non-temporal stores, then one
; sfence so the stores are globally visible before the caller publishes the
; memory as zero.
;
; Copyright (c) zerostart authors.
; SPDX-License-Identifier: BSD-2-Clause-Patent
;------------------------------------------------------------------------------

    DEFAULT REL
    SECTION .text

;------------------------------------------------------------------------------
;  VOID
;  EFIAPI
;  ZeroStartNtZero (
;    IN VOID   *Base,     ; rcx, 64-byte aligned
;    IN UINTN  Length     ; rdx, multiple of 64
;    );
;------------------------------------------------------------------------------
global ASM_PFX(ZeroStartNtZero)
ASM_PFX(ZeroStartNtZero):
    xor     eax, eax
    shr     rdx, 6
    jz      .done
.loop:
    movnti  [rcx], rax
    movnti  [rcx + 8], rax
    movnti  [rcx + 16], rax
    movnti  [rcx + 24], rax
    movnti  [rcx + 32], rax
    movnti  [rcx + 40], rax
    movnti  [rcx + 48], rax
    movnti  [rcx + 56], rax
    add     rcx, 64
    dec     rdx
    jnz     .loop
.done:
    sfence
    ret
