//! Everything that runs in ring 0, in assembly: the boot entry, the
//! exception stubs and system calls, and the C memory functions.
//!
//! Boot protocol (Documentation/arch/x86/boot.rst, "64-bit Boot Protocol"):
//! the loader enters at load address + 0x200 in long mode, interrupts off,
//! with an identity mapping covering the `init_size` window, boot_params and
//! the command line, and RSI = boot_params. It promises no stack, no SSE
//! and no particular GDT or IDT.
//!
//! Why so little ring 0, and in assembly: on a software KVM (like the
//! `kvm-pvm` this project's machines have) guest ring-0 code is emulated
//! instruction by instruction: about a microsecond per instruction (per
//! byte for `rep stos`), and KVM's emulator has no SSE, which compiled Rust
//! code (and the precompiled libcore) uses freely. Ring-3 code runs
//! natively. So ring 0 only sets up segments, the IDT, a 2 MiB user-
//! accessible identity page and then drops to ring 3, where all Rust code
//! runs; ring 0 comes back only for port I/O, CR3 loads and reset (an
//! `int3` system call) and for exceptions. On hardware KVM all of this costs
//! nothing and behaves the same.
//!
//! AT&T syntax: in Intel syntax a bare symbol is a memory operand, which
//! makes `push vector` style code ambiguous.

use core::arch::global_asm;

/// System-call numbers (rdi = number) of the `int3` system call.
pub mod sys {
    /// Write rdx bytes at rsi to COM1.
    pub const SERIAL_WRITE: u64 = 1;
    /// `outl` edx to port si.
    pub const OUTL: u64 = 2;
    /// Load CR3 with rsi.
    pub const LOAD_CR3: u64 = 3;
    /// i8042 reset, then halt forever.
    pub const RESET: u64 = 4;
}

global_asm!(
    r#"
    .set .LUSER_DS, 0x23
    .set .LUSER_CS, 0x2b
    .set .LKERNEL_CS, 0x10
    .set .LKERNEL_DS, 0x18
    .set .LTSS_SEL, 0x30
    .set .LTIMER_PORT, 0x440
    .set .LCOM1, 0x3f8

    .pushsection .head.text, "ax"
    .code32
    .globl startup_32
startup_32:
    /* The 32-bit entry (code32_start) is not supported: halt. */
    cli
.Lhalt32:
    hlt
    jmp .Lhalt32

    .org 0x200
    .code64
    .globl startup_64
startup_64:
    cli
    cld
    /* First sign of life for the VMM's boot timeline: kernel_started. */
    movl $.LTIMER_PORT, %edx
    movl $0x5a530001, %eax
    outl %eax, %dx
    /* The probe is linked for one address (not relocatable). Compare where
       it runs with where it was linked before touching any absolute
       address. */
    leaq startup_64(%rip), %rax
    movl $startup_64, %ecx
    cmpq %rcx, %rax
    jne .Lwrong_address
    movq %rsi, %r12
    movl $__ring0_stack_top, %esp

    /* SSE for ring 3: CR0.EM=0, CR0.TS=0, CR0.MP=1; CR4.OSFXSR=1,
       CR4.OSXMMEXCPT=1. CR4.SMEP and CR4.SMAP off: ring 0 runs from and
       touches the user-accessible probe page. */
    movq %cr0, %rax
    andq $-13, %rax
    orq $2, %rax
    movq %rax, %cr0
    movq %cr4, %rax
    orq $0x600, %rax
    andq $~0x300000, %rax
    movq %rax, %cr4
    fninit

    /* COM1: 115200 8N1, FIFOs on, interrupts off. */
    movl $(.LCOM1 + 1), %edx
    xorl %eax, %eax
    outb %al, %dx               /* IER: no interrupts */
    movl $(.LCOM1 + 3), %edx
    movb $0x80, %al
    outb %al, %dx               /* LCR: DLAB */
    movl $.LCOM1, %edx
    movb $1, %al
    outb %al, %dx               /* divisor 1: 115200 baud */
    movl $(.LCOM1 + 1), %edx
    xorl %eax, %eax
    outb %al, %dx
    movl $(.LCOM1 + 3), %edx
    movb $3, %al
    outb %al, %dx               /* 8N1 */
    movl $(.LCOM1 + 2), %edx
    movb $0xc7, %al
    outb %al, %dx               /* FCR: enable and clear FIFOs */
    movl $(.LCOM1 + 4), %edx
    movb $3, %al
    outb %al, %dx               /* MCR: DTR, RTS */

    /* TSS descriptor (GDT slots 6 and 7): base = probe_tss, limit 0x67,
       type 0x89 (present, available 64-bit TSS). The image is below 4 GiB,
       so the base's high half is 0. */
    movl $probe_tss, %eax
    movq %rax, %rcx
    andl $0xffffff, %ecx
    shlq $16, %rcx
    orq $0x67, %rcx
    movq %rax, %rdx
    shrq $24, %rdx
    shlq $56, %rdx
    orq %rdx, %rcx
    movabsq $0x890000000000, %rdx
    orq %rdx, %rcx
    movq %rcx, probe_gdt + 0x30
    movq $0, probe_gdt + 0x38
    movq $__ring0_stack_top, probe_tss + 4
    movq $__ist_stack_top, probe_tss + 36

    lgdt probe_gdtr
    pushq $.LKERNEL_CS
    leaq .Lreloaded(%rip), %rax
    pushq %rax
    lretq
.Lreloaded:
    movl $.LKERNEL_DS, %eax
    movl %eax, %ds
    movl %eax, %es
    movl %eax, %ss
    movl %eax, %fs
    movl %eax, %gs
    movl $.LTSS_SEL, %eax
    ltr %ax

    /* IDT: vectors 0-31 -> exception stubs (interrupt gates, IST1).
       Vector 3 has DPL 3: `int3` from ring 3 is the system call (see
       exception_common). */
    xorl %ecx, %ecx
.Lidt_loop:
    movq %rcx, %rax
    shlq $4, %rax
    addq $exception_stubs, %rax
    movl $0x8e01, %edx
    cmpl $3, %ecx
    jne .Lidt_set
    movl $0xee01, %edx
.Lidt_set:
    call .Lset_gate
    incl %ecx
    cmpl $32, %ecx
    jne .Lidt_loop
    lidt probe_idtr


    /* One user-accessible 2 MiB identity page at 0: the probe's image,
       data, bss and stacks (link.ld asserts they fit). Ring 3 maps the
       rest itself. */
    movq $boot_pdpt + 0x7, boot_pml4
    movq $boot_pd + 0x7, boot_pdpt
    movq $0x87, boot_pd
    movl $boot_pml4, %eax
    movq %rax, %cr3

    /* Drop to ring 3: IF=0, IOPL=0. */
    pushq $.LUSER_DS
    pushq $__stack_top
    pushq $2
    pushq $.LUSER_CS
    pushq $user_entry
    iretq

/* IDT gate for vector rcx -> handler rax; dx = type/attr << 8 | IST.
   Clobbers rax, rdx, rsi, rdi. */
.Lset_gate:
    movq %rcx, %rdi
    shlq $4, %rdi
    addq $probe_idt, %rdi
    movq %rax, %rsi
    andl $0xffff, %esi
    orl $(.LKERNEL_CS << 16), %esi
    movl %esi, (%rdi)
    movw %dx, 4(%rdi)
    shrq $16, %rax
    movw %ax, 6(%rdi)
    shrq $16, %rax
    movl %eax, 8(%rdi)
    movl $0, 12(%rdi)
    ret

.Lwrong_address:
    /* Position-independent from here: no stack, RIP-relative data only. */
    leaq .Lwrong_msg(%rip), %rsi
    movl $.LCOM1, %edx
.Lwrong_loop:
    lodsb
    testb %al, %al
    jz .Lhard_reset
    outb %al, %dx
    jmp .Lwrong_loop
.Lwrong_msg:
    .asciz "ZSPROBE: FAIL reason=wrong_load_address\n"

.Lhard_reset:
    movb $0xfe, %al
    outb %al, $0x64
.Lhalt64:
    cli
    hlt
    jmp .Lhalt64
    .popsection

    .pushsection .text.ring3_entry, "ax"
/* First ring-3 instruction. bss is cleared here, natively: on a software
   KVM a ring-0 `rep stos` is emulated byte by byte. */
user_entry:
    movl $__bss_start, %edi
    movl $__bss_end, %ecx
    subq %rdi, %rcx
    shrq $3, %rcx
    xorl %eax, %eax
    rep stosq
    ldmxcsr .Lmxcsr_default(%rip)
    xorl %ebp, %ebp
    movq %r12, %rdi
    call probe_main
    ud2
    .p2align 2
.Lmxcsr_default:
    .long 0x1f80
    .popsection

    /* Exception stubs, 16 bytes apart: stub i is at exception_stubs +
       16 * i. Vectors without a CPU-pushed error code push 0 so every frame
       reads [vector, error, rip, cs, rflags, rsp, ss]. Bit v of 0x60227d00
       marks the vectors that have an error code. */
    .pushsection .text.ring0, "ax"
    .p2align 4
    .globl exception_stubs
exception_stubs:
    .set .Lvec, 0
    .rept 32
    .p2align 4
    .if ((0x60227d00 >> .Lvec) & 1) == 0
    pushq $0
    .endif
    pushq $.Lvec
    jmp exception_common
    .set .Lvec, .Lvec + 1
    .endr

/* `int3` from ring 3 is a system call. Any other fault in ring 3 is
   reported by ring-3 Rust code: rewrite the frame to "return" into
   probe_exception(vector, error, rip, cr2) on a fresh stack. A second
   fault, or one in ring 0, is printed from here. */
exception_common:
    testb $3, 24(%rsp)
    jz .Lring0_fault
    cmpq $3, (%rsp)
    je syscall_entry
    cmpb $0, .Lreporting(%rip)
    jne .Lring0_fault
    movb $1, .Lreporting(%rip)
    movq (%rsp), %rdi
    movq 8(%rsp), %rsi
    movq 16(%rsp), %rdx
    movq %cr2, %rcx
    addq $16, %rsp
    movq $probe_exception, (%rsp)
    movq $2, 16(%rsp)
    /* As if called: rsp + 8 16-byte aligned at function entry. */
    movq $__exc_stack_top - 8, 24(%rsp)
    iretq

.Lring0_fault:
    movl $.LTIMER_PORT, %edx
    movl $0x5a530003, %eax
    outl %eax, %dx
    leaq .Lfault_msg(%rip), %rsi
    call .Lputs
    movq (%rsp), %rax
    call .Lputhex
    leaq .Lfault_rip(%rip), %rsi
    call .Lputs
    movq 16(%rsp), %rax
    call .Lputhex
    leaq .Lfault_ring(%rip), %rsi
    call .Lputs
    movq 24(%rsp), %rax
    andq $3, %rax
    call .Lputhex
    movb $10, %al
    movl $.LCOM1, %edx
    outb %al, %dx
    jmp .Lhard_reset

/* Print the NUL-terminated string at rsi. Clobbers rax, rdx, rsi. */
.Lputs:
    movl $.LCOM1, %edx
.Lputs_loop:
    lodsb
    testb %al, %al
    jz .Lputs_done
    outb %al, %dx
    jmp .Lputs_loop
.Lputs_done:
    ret

/* Print rax as hex without leading zeros. Clobbers rax, rcx, rdx, rsi. */
.Lputhex:
    movq %rax, %rsi
    movl $60, %ecx
.Lputhex_skip:
    testl %ecx, %ecx
    jz .Lputhex_digit
    movq %rsi, %rax
    shrq %cl, %rax
    testb $0xf, %al
    jnz .Lputhex_digit
    subl $4, %ecx
    jmp .Lputhex_skip
.Lputhex_digit:
    movq %rsi, %rax
    shrq %cl, %rax
    andl $0xf, %eax
    cmpb $10, %al
    jb .Lputhex_dec
    addb $39, %al  /* 'a' - 10 - '0' */
.Lputhex_dec:
    addb $48, %al  /* '0' */
    movl $.LCOM1, %edx
    outb %al, %dx
    subl $4, %ecx
    jns .Lputhex_digit
    ret

.Lfault_msg:
    .asciz "ZSPROBE: FAIL reason=exception_ring0 vector=0x"
.Lfault_rip:
    .asciz " rip=0x"
.Lfault_ring:
    .asciz " ring="

/* System call: `int3` from ring 3, on the IST stack below the frame
   [3, 0, rip, cs, rflags, rsp, ss] (rip already past the int3): rdi =
   number, rsi, rdx = arguments (see `sys`). Clobbers rax, rdx, rsi, rdi,
   r8, r9.

   Why int3 and not SYSCALL or `int $0x80`: the software KVM this project
   runs on delivers exceptions to the guest's ring 0 faithfully, but runs a
   SYSCALL handler without I/O privilege and rejects `int $0x80` with #UD.
   An exception gate works the same on every KVM. */
syscall_entry:
    cmpq $1, %rdi
    je .Lsys_serial
    cmpq $2, %rdi
    je .Lsys_outl
    cmpq $3, %rdi
    je .Lsys_cr3
    cmpq $4, %rdi
    je .Lhard_reset
.Lsys_done:
    addq $16, %rsp
    iretq
.Lsys_serial:
    movq %rdx, %r9
.Lsys_serial_byte:
    testq %r9, %r9
    jz .Lsys_done
    /* Wait (bounded) for the transmit holding register to drain: a
       missing or stuck UART must not hang the probe. */
    movl $10000, %r8d
    movl $(.LCOM1 + 5), %edx
.Lsys_lsr:
    inb %dx, %al
    testb $0x20, %al
    jnz .Lsys_put
    decl %r8d
    jnz .Lsys_lsr
.Lsys_put:
    movl $.LCOM1, %edx
    movb (%rsi), %al
    outb %al, %dx
    incq %rsi
    decq %r9
    jmp .Lsys_serial_byte
.Lsys_outl:
    movl %edx, %eax
    movl %esi, %edx
    outl %eax, %dx
    jmp .Lsys_done
.Lsys_cr3:
    movq %rsi, %cr3
    jmp .Lsys_done
    .popsection

    /* Ring-0 state. In .data, not .bss: it is used before bss is cleared,
       and file-backed data needs no clearing. */
    .pushsection .data.ring0, "aw"
    .p2align 4
probe_gdt:
    .quad 0
    .quad 0
    .quad 0x00af9a000000ffff    /* 0x10: 64-bit code, DPL 0 */
    .quad 0x00cf92000000ffff    /* 0x18: data, DPL 0 */
    .quad 0x00cff2000000ffff    /* 0x20: data, DPL 3 */
    .quad 0x00affa000000ffff    /* 0x28: 64-bit code, DPL 3 */
    .quad 0                     /* 0x30: TSS, filled at boot */
    .quad 0
probe_gdtr:
    .word 8 * 8 - 1
    .quad probe_gdt
    .p2align 4
probe_idtr:
    .word 256 * 16 - 1
    .quad probe_idt
    .p2align 4
probe_tss:
    .zero 0x66
    .word 0x68                  /* iomap_base: no I/O bitmap */
.Lreporting:
    .byte 0
    .p2align 12
probe_idt:
    .zero 256 * 16
    .globl boot_pml4, boot_pdpt, boot_pd
boot_pml4:
    .zero 4096
boot_pdpt:
    .zero 4096
boot_pd:
    .zero 4096
    .popsection

    /* The C memory functions compiled code calls. compiler_builtins only
       provides them for targets without a libc, and the probe links none.
       Ring 3 only. */
    .pushsection .text.memfns, "ax"
    .globl memcpy
memcpy:
    movq %rdi, %rax
    movq %rdx, %rcx
    rep movsb
    ret

    .globl memset
memset:
    movq %rdi, %r9
    movl %esi, %eax
    movq %rdx, %rcx
    rep stosb
    movq %r9, %rax
    ret

    .globl memmove
memmove:
    movq %rdi, %rax
    movq %rdx, %rcx
    cmpq %rsi, %rdi
    jbe .Lmemmove_fwd
    leaq -1(%rsi,%rcx), %rsi
    leaq -1(%rdi,%rcx), %rdi
    std
    rep movsb
    cld
    ret
.Lmemmove_fwd:
    rep movsb
    ret

    .globl memcmp
    .globl bcmp
memcmp:
bcmp:
    xorl %eax, %eax
.Lmemcmp_loop:
    testq %rdx, %rdx
    jz .Lmemcmp_done
    movzbl (%rdi), %eax
    movzbl (%rsi), %ecx
    subl %ecx, %eax
    jnz .Lmemcmp_done
    incq %rdi
    incq %rsi
    decq %rdx
    jmp .Lmemcmp_loop
.Lmemcmp_done:
    ret
    .popsection

    /* The precompiled libcore's unwind tables name a personality routine.
       The probe aborts on panic and discards .eh_frame, so nothing calls
       it; trap if anything ever does. */
    .pushsection .text.personality, "ax"
    .globl rust_eh_personality
rust_eh_personality:
    ud2
    .popsection
"#,
    options(att_syntax)
);

extern "C" {
    /// The boot page tables: PML4, PDPT and the page directory of the
    /// first GiB, 4 KiB each.
    pub static mut boot_pml4: [u64; 512];
    /// See [`boot_pml4`].
    pub static mut boot_pdpt: [u64; 512];
    /// See [`boot_pml4`].
    pub static mut boot_pd: [u64; 512];
}
