; hintdump: a 64-bit guest (entered like Linux: long mode, RSI = boot_params,
; RSP = a small stack) that prints on COM1
;   B:<hex of boot_params bytes 0x1f0..0x290>   (setup header: initrd, cmdline, ...)
;   H:<hex of the zerostart hint blob>          (or N if there is no hint node)
; and resets through the i8042. Assembled bytes are embedded in
; vmm/zerostart/tests/redteam_hint.rs (HINTDUMP); rebuild with
;   nasm -f bin -o hintdump.bin hintdump.asm && xxd -i hintdump.bin
bits 64
start:
    mov dx, 0x3f8
    mov al, 'B'
    out dx, al
    mov al, ':'
    out dx, al
    lea rdi, [rsi + 0x1f0]
    mov ecx, 0xa0
    call dump
    mov rbx, [rsi + 0x250]          ; hdr.setup_data
walk:
    test rbx, rbx
    jz none
    cmp dword [rbx + 8], 0x5a480001 ; SETUP_ZEROSTART_HINT
    je found
    mov rbx, [rbx]
    jmp walk
none:
    mov al, 'N'
    out dx, al
    jmp done
found:
    mov al, 'H'
    out dx, al
    mov al, ':'
    out dx, al
    mov ecx, [rbx + 12]
    lea rdi, [rbx + 16]
    call dump
done:
    mov al, 10
    out dx, al
    mov al, 0xfe
    out 0x64, al
    hlt
    jmp done

; prints ecx bytes at rdi as hex, then a newline (dx = COM1)
dump:
    test ecx, ecx
    jz .eol
    movzx r8d, byte [rdi]
    mov eax, r8d
    shr eax, 4
    call nibble
    mov eax, r8d
    and eax, 15
    call nibble
    inc rdi
    dec ecx
    jmp dump
.eol:
    mov al, 10
    out dx, al
    ret

nibble:
    add al, '0'
    cmp al, '9'
    jbe .out
    add al, 'a' - '9' - 1
.out:
    out dx, al
    ret
