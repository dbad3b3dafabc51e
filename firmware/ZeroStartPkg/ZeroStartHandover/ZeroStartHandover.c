/** @file
  ZeroStartHandover: a test boot loader that does to guest memory what any
  EFI boot loader may do before Linux runs, then tells the kernel that the
  memory is zero. It is the attack the kernel's rule "on an EFI boot only
  the firmware's EFI table can vouch for memory" (both kernel lines, patch
  "trust no setup_data hint on an EFI boot") exists for:

    1. load \bzImage, \initrd and \cmdline.txt from its own volume, as GRUB
       or systemd-boot would, and build boot_params from the image's setup
       header with the loader ID a VMM's direct boot writes (0xFF), so no
       other refusal rule than the EFI one applies;
    2. allocate up to the number of MiB \mode.txt names as EfiLoaderData,
       in as few pieces as free memory allows, and fill every page but the
       last of each resulting range with FILL_PATTERN (a boot loader's heap,
       disk buffers, a decrypted passphrase), and then
    3. mode "setup_data": free the pages (they are EfiConventionalMemory
       again, exactly like memory nobody touched) and hand the kernel a
       setup_data hint (docs/hint-abi.md, transport (a)) naming them as
       zero - the kernel must refuse it;
       mode "table": keep the pages allocated and publish them as the
       zerostart EFI configuration table (transport (c)), which the kernel
       trusts as the firmware's word - the negative control: verify mode
       must then catch the filled pages, so the fill demonstrably reaches
       memory the kernel hands out;
    4. jump to the kernel's 64-bit EFI handover entry (Linux boot protocol
       2.11+, CONFIG_EFI_HANDOVER_PROTOCOL), as GRUB's linuxefi does.

  The last page of each range is left zero: it is the hint's marker page
  (docs/hint-abi.md "Lifetime"), so the hint is otherwise one a direct boot
  would take. Lines start with "ZSHANDOVER:"; on any failure the last one is
  "ZSHANDOVER: RESULT FAIL <why>" and the machine powers off.

  This is test code: it exists to make the kernel's refusal fail if the rule
  were gone. Never ship it as a boot loader.

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#include <Uefi.h>
#include <Guid/FileInfo.h>
#include <Guid/ZeroStartHint.h>
#include <Internal/ZeroStartTestPattern.h>
#include <Protocol/LoadedImage.h>
#include <Protocol/SimpleFileSystem.h>
#include <Library/BaseLib.h>
#include <Library/BaseMemoryLib.h>
#include <Library/MemoryAllocationLib.h>
#include <Library/UefiApplicationEntryPoint.h>
#include <Library/UefiBootServicesTableLib.h>
#include <Library/UefiLib.h>
#include <Library/UefiRuntimeServicesTableLib.h>
#include <Library/ZeroHintLib.h>


//
// Linux x86 boot protocol (Documentation/arch/x86/boot.rst). The setup
// header sits at the same offsets in the bzImage and in boot_params.
//
#define BP_SIZE                  0x1000
#define BP_EXT_RAMDISK_IMAGE     0x0C0
#define BP_EXT_RAMDISK_SIZE      0x0C4
#define BP_EXT_CMD_LINE_PTR      0x0C8
#define HDR_START                0x1F1   // setup_sects: the header's first byte
#define HDR_JUMP_LENGTH          0x201   // the header ends at 0x202 + this byte
#define HDR_MAGIC                0x202   // "HdrS"
#define HDR_VERSION              0x206
#define HDR_TYPE_OF_LOADER       0x210
#define HDR_CODE32_START         0x214
#define HDR_RAMDISK_IMAGE        0x218
#define HDR_RAMDISK_SIZE         0x21C
#define HDR_CMD_LINE_PTR         0x228
#define HDR_INITRD_ADDR_MAX      0x22C
#define HDR_KERNEL_ALIGNMENT     0x230
#define HDR_XLOADFLAGS           0x236
#define HDR_CMDLINE_SIZE         0x238
#define HDR_SETUP_DATA           0x250
#define HDR_PREF_ADDRESS         0x258
#define HDR_INIT_SIZE            0x260
#define HDR_HANDOVER_OFFSET      0x264
#define HDR_MAGIC_VALUE          0x53726448U   // "HdrS"
#define HDR_MIN_VERSION          0x020B        // 2.11: handover_offset
#define XLF_EFI_HANDOVER_64      (1U << 3)
/// What rust-vmm's linux-loader, Firecracker and cloud-hypervisor write on a
/// direct boot ("no ID"): the kernel's direct-boot rule lets it through, so
/// the EFI rule is the only one between this loader's hint and the kernel.
#define LOADER_ID_NONE           0xFF
/// docs/hint-abi.md, transport (a); arch/x86/include/uapi/asm/setup_data.h.
#define SETUP_ZEROSTART_HINT     0x5a480001U
#define SETUP_DATA_HEADER_SIZE   16
/// Pieces of the fill: each at least MIN_PIECE, at most MAX_PIECES of them.
#define MIN_PIECE                SIZE_2MB
#define MAX_PIECES               64

/// The 64-bit handover entry: SysV arguments (GRUB, OVMF's old LoadLinuxLib).
#if defined (__GNUC__)
typedef VOID (__attribute__ ((sysv_abi)) *HANDOVER_ENTRY)(
  VOID  *ImageHandle,
  VOID  *SystemTable,
  VOID  *BootParams
  );
#else
  #error "ZeroStartHandover needs GCC's sysv_abi attribute (GCC5 toolchain)"
#endif

STATIC
UINT32
Get32 (
  IN CONST UINT8  *Base,
  IN UINTN        Offset
  )
{
  return ReadUnaligned32 ((CONST UINT32 *)(Base + Offset));
}

STATIC
VOID
Put32 (
  IN UINT8   *Base,
  IN UINTN   Offset,
  IN UINT32  Value
  )
{
  WriteUnaligned32 ((UINT32 *)(Base + Offset), Value);
}

/**
  Print the failure, power off. The harness reads the reason from the
  serial console; a machine that powers off never hangs a test.
**/
STATIC
VOID
Fail (
  IN CONST CHAR16  *Why,
  IN EFI_STATUS    Status
  )
{
  Print (L"ZSHANDOVER: RESULT FAIL %s (%r)\n", Why, Status);
  gRT->ResetSystem (EfiResetShutdown, EFI_SUCCESS, 0, NULL);
  CpuDeadLoop ();
}

/**
  Pages below MaxAddress (AllocateMaxAddress), or at exactly *Address when
  Exact. Returns the address, 0 on failure.
**/
STATIC
EFI_PHYSICAL_ADDRESS
PagesBelow (
  IN UINT64   MaxAddress,
  IN UINTN    Bytes,
  IN BOOLEAN  Exact
  )
{
  EFI_PHYSICAL_ADDRESS  Address;

  Address = MaxAddress;
  if (EFI_ERROR (gBS->AllocatePages (Exact ? AllocateAddress : AllocateMaxAddress, EfiLoaderData,
                                     EFI_SIZE_TO_PAGES (Bytes), &Address)))
  {
    return 0;
  }

  return Address;
}

/**
  Read the whole file Name of Root into pages below MaxAddress (the
  boot protocol's limits for the initrd and the command line), with one
  NUL after it. Fails the test when the file is missing.
**/
STATIC
EFI_PHYSICAL_ADDRESS
ReadFile (
  IN  EFI_FILE_PROTOCOL  *Root,
  IN  CHAR16             *Name,
  IN  UINT64             MaxAddress,
  OUT UINTN              *Size
  )
{
  EFI_FILE_PROTOCOL     *File;
  EFI_FILE_INFO         *Info;
  UINTN                 InfoSize;
  UINTN                 Length;
  EFI_PHYSICAL_ADDRESS  Buffer;
  EFI_STATUS            Status;

  Status = Root->Open (Root, &File, Name, EFI_FILE_MODE_READ, 0);
  if (EFI_ERROR (Status)) {
    Print (L"ZSHANDOVER: cannot open %s\n", Name);
    Fail (L"a file the test puts on the volume is missing", Status);
  }

  InfoSize = 0;
  Info     = NULL;
  Status   = File->GetInfo (File, &gEfiFileInfoGuid, &InfoSize, NULL);
  if (Status == EFI_BUFFER_TOO_SMALL) {
    Info   = AllocatePool (InfoSize);
    Status = (Info == NULL) ? EFI_OUT_OF_RESOURCES : File->GetInfo (File, &gEfiFileInfoGuid, &InfoSize, Info);
  }

  if (EFI_ERROR (Status)) {
    Fail (L"cannot read a file's size", Status);
  }

  Length = (UINTN)Info->FileSize;
  FreePool (Info);
  Buffer = PagesBelow (MaxAddress, Length + 1, FALSE);
  if (Buffer == 0) {
    Fail (L"no memory for a file", EFI_OUT_OF_RESOURCES);
  }

  *Size  = Length;
  Status = File->Read (File, &Length, (VOID *)(UINTN)Buffer);
  if (EFI_ERROR (Status) || (Length != *Size)) {
    Fail (L"short read", Status);
  }

  ((UINT8 *)(UINTN)Buffer)[Length] = 0;
  File->Close (File);
  Print (L"ZSHANDOVER: %s: %lu bytes at 0x%lx\n", Name, (UINT64)Length, Buffer);
  return Buffer;
}

/**
  The root directory of the volume this application was loaded from.
**/
STATIC
EFI_FILE_PROTOCOL *
OpenOwnVolume (
  IN EFI_HANDLE  ImageHandle
  )
{
  EFI_LOADED_IMAGE_PROTOCOL        *Loaded;
  EFI_SIMPLE_FILE_SYSTEM_PROTOCOL  *Fs;
  EFI_FILE_PROTOCOL                *Root;
  EFI_STATUS                       Status;

  Status = gBS->HandleProtocol (ImageHandle, &gEfiLoadedImageProtocolGuid, (VOID **)&Loaded);
  if (!EFI_ERROR (Status)) {
    Status = gBS->HandleProtocol (Loaded->DeviceHandle, &gEfiSimpleFileSystemProtocolGuid, (VOID **)&Fs);
  }

  if (!EFI_ERROR (Status)) {
    Status = Fs->OpenVolume (Fs, &Root);
  }

  if (EFI_ERROR (Status)) {
    Fail (L"cannot open the volume this application came from", Status);
  }

  return Root;
}

/**
  Parse \mode.txt: "setup_data MIB" or "table MIB".
**/
STATIC
VOID
ParseMode (
  IN  CHAR8    *Text,
  OUT BOOLEAN  *Table,
  OUT UINTN    *FillMib
  )
{
  CHAR8  *Number;

  if (AsciiStrnCmp (Text, "setup_data ", 11) == 0) {
    *Table = FALSE;
    Number = Text + 11;
  } else if (AsciiStrnCmp (Text, "table ", 6) == 0) {
    *Table = TRUE;
    Number = Text + 6;
  } else {
    Fail (L"mode.txt must read 'setup_data MIB' or 'table MIB'", EFI_INVALID_PARAMETER);
    return;
  }

  *FillMib = AsciiStrDecimalToUintn (Number);
  if ((*FillMib == 0) || (*FillMib > 65536)) {
    Fail (L"mode.txt: the fill size must be 1..65536 MiB", EFI_INVALID_PARAMETER);
  }
}

/**
  The kernel's command line from \cmdline.txt, trailing white space cut
  (a text editor's newline would become part of the last argument).
**/
STATIC
VOID
TrimCommandLine (
  IN CHAR8  *Text,
  IN UINTN  Size
  )
{
  while (Size > 0 && (Text[Size - 1] == '\n' || Text[Size - 1] == '\r' || Text[Size - 1] == ' ')) {
    Text[--Size] = 0;
  }
}

/**
  Entry point: see the file comment.
**/
EFI_STATUS
EFIAPI
ZeroStartHandoverMain (
  IN EFI_HANDLE        ImageHandle,
  IN EFI_SYSTEM_TABLE  *SystemTable
  )
{
  EFI_FILE_PROTOCOL     *Root;
  EFI_PHYSICAL_ADDRESS  Image;
  EFI_PHYSICAL_ADDRESS  Initrd;
  EFI_PHYSICAL_ADDRESS  CommandLine;
  EFI_PHYSICAL_ADDRESS  ModeText;
  EFI_PHYSICAL_ADDRESS  Kernel;
  EFI_PHYSICAL_ADDRESS  BootParams;
  EFI_PHYSICAL_ADDRESS  SetupData;
  EFI_PHYSICAL_ADDRESS  Fill;
  ZERO_RANGE            Pieces[MAX_PIECES];
  ZERO_RANGE            Ranges[MAX_PIECES];
  UINTN                 Count;
  UINTN                 RangeCount;
  UINTN                 Index;
  UINTN                 Wanted;
  UINTN                 Filled;
  UINTN                 Piece;
  UINTN                 ImageSize;
  UINTN                 InitrdSize;
  UINTN                 CommandLineSize;
  UINTN                 ModeSize;
  UINTN                 SetupSize;
  UINTN                 KernelSize;
  UINTN                 Alignment;
  UINTN                 InitSize;
  UINTN                 FillMib;
  UINTN                 HintSize;
  BOOLEAN               Table;
  UINT8                 *Header;
  UINT8                 *Bp;
  UINT8                 Hint[ZSHINT_HEADER_SIZE + ZSHINT_ENTRY_SIZE * MAX_PIECES];
  VOID                  *Published;
  HANDOVER_ENTRY        Entry;
  EFI_STATUS            Status;

  Root = OpenOwnVolume (ImageHandle);

  // 1. What a boot loader loads.
  ModeText = ReadFile (Root, L"\\mode.txt", MAX_UINT32, &ModeSize);
  ParseMode ((CHAR8 *)(UINTN)ModeText, &Table, &FillMib);
  Image  = ReadFile (Root, L"\\bzImage", MAX_UINT64, &ImageSize);
  Header = (UINT8 *)(UINTN)Image;
  if ((ImageSize < 0x1000) || (Get32 (Header, HDR_MAGIC) != HDR_MAGIC_VALUE) ||
      ((ReadUnaligned16 ((UINT16 *)(Header + HDR_VERSION))) < HDR_MIN_VERSION) ||
      ((ReadUnaligned16 ((UINT16 *)(Header + HDR_XLOADFLAGS)) & XLF_EFI_HANDOVER_64) == 0) ||
      (Get32 (Header, HDR_HANDOVER_OFFSET) == 0))
  {
    Fail (L"bzImage has no 64-bit EFI handover entry (CONFIG_EFI_HANDOVER_PROTOCOL)", EFI_UNSUPPORTED);
  }

  Initrd      = ReadFile (Root, L"\\initrd", Get32 (Header, HDR_INITRD_ADDR_MAX), &InitrdSize);
  CommandLine = ReadFile (Root, L"\\cmdline.txt", MAX_UINT32, &CommandLineSize);
  TrimCommandLine ((CHAR8 *)(UINTN)CommandLine, CommandLineSize);
  if (AsciiStrLen ((CHAR8 *)(UINTN)CommandLine) > Get32 (Header, HDR_CMDLINE_SIZE)) {
    Fail (L"cmdline.txt is longer than the kernel's cmdline_size", EFI_BAD_BUFFER_SIZE);
  }

  // The protected-mode kernel: init_size bytes at pref_address if free,
  // else below 1 GiB at kernel_alignment (what GRUB's linuxefi does).
  SetupSize = ((Header[HDR_START] == 0) ? 4 : Header[HDR_START]) * 512 + 512;
  if (SetupSize >= ImageSize) {
    Fail (L"bzImage's setup_sects run past the file", EFI_LOAD_ERROR);
  }

  KernelSize = ImageSize - SetupSize;
  InitSize   = MAX (Get32 (Header, HDR_INIT_SIZE), KernelSize);
  Alignment  = MAX (Get32 (Header, HDR_KERNEL_ALIGNMENT), EFI_PAGE_SIZE);
  Kernel     = PagesBelow (ReadUnaligned64 ((UINT64 *)(Header + HDR_PREF_ADDRESS)), InitSize, TRUE);
  if (Kernel == 0) {
    Kernel = PagesBelow (SIZE_1GB - 1, InitSize + Alignment, FALSE);
    Kernel = ALIGN_VALUE (Kernel, (UINT64)Alignment);
  }

  if (Kernel == 0) {
    Fail (L"no memory for the kernel", EFI_OUT_OF_RESOURCES);
  }

  CopyMem ((VOID *)(UINTN)Kernel, Header + SetupSize, KernelSize);

  // boot_params: the image's setup header and what a loader fills in.
  BootParams = PagesBelow (MAX_UINT32, BP_SIZE, FALSE);
  SetupData  = PagesBelow (MAX_UINT32, EFI_PAGE_SIZE, FALSE);
  if ((BootParams == 0) || (SetupData == 0)) {
    Fail (L"no memory for boot_params", EFI_OUT_OF_RESOURCES);
  }

  Bp = (UINT8 *)(UINTN)BootParams;
  ZeroMem (Bp, BP_SIZE);
  CopyMem (Bp + HDR_START, Header + HDR_START, 0x202 + Header[HDR_JUMP_LENGTH] - HDR_START);
  Bp[HDR_TYPE_OF_LOADER] = LOADER_ID_NONE;
  Put32 (Bp, HDR_CODE32_START, (UINT32)Kernel);
  Put32 (Bp, HDR_RAMDISK_IMAGE, (UINT32)Initrd);
  Put32 (Bp, HDR_RAMDISK_SIZE, (UINT32)InitrdSize);
  Put32 (Bp, BP_EXT_RAMDISK_IMAGE, (UINT32)RShiftU64 (Initrd, 32));
  Put32 (Bp, BP_EXT_RAMDISK_SIZE, 0);
  Put32 (Bp, HDR_CMD_LINE_PTR, (UINT32)CommandLine);
  Put32 (Bp, BP_EXT_CMD_LINE_PTR, 0);

  // 2. A loader's heap and buffers: written, then (setup_data) freed. Last,
  // so that nothing this application still loads lands in them. Free memory
  // is split by what is loaded, so take it in pieces, each as large as fits.
  Wanted = FillMib * SIZE_1MB;
  Filled = 0;
  Count  = 0;
  Piece  = Wanted;
  while (Filled < Wanted && Count < MAX_PIECES && Piece >= MIN_PIECE) {
    Piece  = MIN (Piece, Wanted - Filled);
    Status = gBS->AllocatePages (AllocateAnyPages, EfiLoaderData, EFI_SIZE_TO_PAGES (Piece), &Fill);
    if (EFI_ERROR (Status)) {
      Piece = (Piece / 2) & ~(UINTN)EFI_PAGE_MASK;
      continue;
    }

    Pieces[Count].Start  = Fill;
    Pieces[Count++].Last = Fill + Piece - 1;
    Filled              += Piece;
  }

  if (Filled < Wanted / 2) {
    Fail (L"less than half of the fill could be allocated", EFI_OUT_OF_RESOURCES);
  }

  CopyMem (Ranges, Pieces, Count * sizeof (ZERO_RANGE));
  RangeCount = ZeroRangesNormalize (Ranges, Count);
  for (Index = 0; Index < RangeCount; Index++) {
    SetMem64 ((VOID *)(UINTN)Ranges[Index].Start, (UINTN)(Ranges[Index].Last - Ranges[Index].Start + 1 - EFI_PAGE_SIZE),
              FILL_PATTERN);
    Print (
      L"ZSHANDOVER: filled 0x%lx-0x%lx (%lu pages) with the pattern, marker page 0x%lx left zero\n",
      Ranges[Index].Start,
      Ranges[Index].Last,
      RShiftU64 (Ranges[Index].Last - Ranges[Index].Start + 1, EFI_PAGE_SHIFT) - 1,
      Ranges[Index].Last + 1 - EFI_PAGE_SIZE
      );
  }

  Print (L"ZSHANDOVER: fill %lu MiB in %u ranges\n", (UINT64)(Filled / SIZE_1MB), (UINT32)RangeCount);

  // 3. The hint naming those pages as zero.
  HintSize = ZeroHintEncode (Ranges, RangeCount, NULL, 0, Hint, sizeof (Hint));
  if (HintSize == 0) {
    Fail (L"cannot encode the hint", EFI_INVALID_PARAMETER);
  }

  if (Table) {
    Status = gBS->AllocatePool (EfiRuntimeServicesData, HintSize, &Published);
    if (!EFI_ERROR (Status)) {
      CopyMem (Published, Hint, HintSize);
      Status = gBS->InstallConfigurationTable (&gZeroStartHintTableGuid, Published);
    }

    if (EFI_ERROR (Status)) {
      Fail (L"cannot publish the EFI table", Status);
    }

    Print (L"ZSHANDOVER: kept the pages, published them as the EFI table at 0x%lx\n", (UINT64)(UINTN)Published);
  } else {
    for (Index = 0; Index < Count; Index++) {
      Status = gBS->FreePages (Pieces[Index].Start, EFI_SIZE_TO_PAGES ((UINTN)(Pieces[Index].Last - Pieces[Index].Start + 1)));
      if (EFI_ERROR (Status)) {
        Fail (L"cannot free the fill", Status);
      }
    }

    if (SETUP_DATA_HEADER_SIZE + HintSize > EFI_PAGE_SIZE) {
      Fail (L"the hint does not fit its setup_data page", EFI_BAD_BUFFER_SIZE);
    }

    ZeroMem ((VOID *)(UINTN)SetupData, EFI_PAGE_SIZE);     // next = 0: the only entry
    WriteUnaligned32 ((UINT32 *)(UINTN)(SetupData + 8), SETUP_ZEROSTART_HINT);
    WriteUnaligned32 ((UINT32 *)(UINTN)(SetupData + 12), (UINT32)HintSize);
    CopyMem ((VOID *)(UINTN)(SetupData + SETUP_DATA_HEADER_SIZE), Hint, HintSize);
    WriteUnaligned64 ((UINT64 *)(Bp + HDR_SETUP_DATA), SetupData);
    Print (L"ZSHANDOVER: freed the pages, setup_data hint at 0x%lx\n", SetupData);
  }

  // 4. EFI handover: entry at the 64-bit offset, 0x200 past handover_offset.
  Entry = (HANDOVER_ENTRY)(UINTN)(Kernel + Get32 (Header, HDR_HANDOVER_OFFSET) + 0x200);
  Print (L"ZSHANDOVER: kernel at 0x%lx, handover to 0x%lx\n", Kernel, (UINT64)(UINTN)Entry);
  Entry (ImageHandle, SystemTable, Bp);
  Fail (L"the kernel's handover entry returned", EFI_LOAD_ERROR);
  return EFI_LOAD_ERROR;
}
