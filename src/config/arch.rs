//! The firmware families a pool may boot per architecture (`pools.NAME.arch`): each by name,
//! and which option 93 codes (RFC 4578) it covers. `check_arch.rs` checks the section;
//! `model.rs` holds what a family boots (`Variant`).

use std::fmt;

/// A family of client firmware, as option 93 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    /// Legacy PC BIOS (option 93: 0).
    Bios,
    /// x86-64 UEFI (7, 9; HTTP boot 16). OVMF says 7 (EFI BC), which in practice is x64.
    X64,
    /// 32-bit x86 UEFI (6; HTTP boot 15).
    Ia32,
    /// 64-bit ARM UEFI (11; HTTP boot 19), e.g. AAVMF, servers and boards with UEFI.
    Arm64,
}

impl Arch {
    pub const ALL: [Arch; 4] = [Arch::Bios, Arch::X64, Arch::Ia32, Arch::Arm64];

    /// The name pools.yaml uses.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Bios => "bios",
            Arch::X64 => "x64",
            Arch::Ia32 => "ia32",
            Arch::Arm64 => "arm64",
        }
    }

    pub fn parse(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The family of an option 93 code; `None` for codes no family here covers (Itanium,
    /// ARM32, RISC-V, ...), which get the pool's own content.
    pub fn of_code(code: u16) -> Option<Arch> {
        use crate::proto::dhcp::arch as c;
        match code {
            c::BIOS => Some(Arch::Bios),
            c::EFI_BC | c::EFI_X64 | c::EFI_X64_HTTP => Some(Arch::X64),
            c::EFI_IA32 | c::EFI_IA32_HTTP => Some(Arch::Ia32),
            c::EFI_ARM64 | c::EFI_ARM64_HTTP => Some(Arch::Arm64),
            _ => None,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
