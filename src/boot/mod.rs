//! Boot policy: given what a client said about itself, which pool it is in, which loader or
//! script it gets and what its kernel command line says. Plain data in, plain data out; the
//! services ask `plan` and never decide these things themselves.

pub mod addition;
pub mod exports;
pub mod grub;
pub mod lease_share;
pub mod leases;
pub mod leases6;
pub mod next;
pub mod prefetch;
pub mod script;
pub mod subnet;
pub mod tracker;
pub mod wake;

use crate::config::{Config, Mac, Member};
use crate::proto::dhcp::arch;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a DHCP client told us about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    pub mac: Mac,
    /// Option 93, if sent.
    pub arch: Option<u16>,
    /// Option 77 or 175 says iPXE: it wants a script, not another loader.
    pub ipxe: bool,
    /// Option 60 starts with `PXEClient` (or `HTTPClient`): firmware or iPXE network booting.
    pub pxe: bool,
    /// Option 60 starts with `HTTPClient`: UEFI HTTP boot, which can only fetch a URL.
    pub http: bool,
}

/// What the client is told to load next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootFile {
    /// A loader fetched over TFTP from next-server (option 66/67, siaddr/file).
    Tftp(String),
    /// A URL: the iPXE script, or a loader for UEFI HTTP boot.
    Url(String),
}

impl BootFile {
    /// The text of the DHCP `file` field / option 67.
    pub fn as_str(&self) -> &str {
        match self {
            BootFile::Tftp(s) | BootFile::Url(s) => s,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Plan<'a> {
    pub member: Member<'a>,
    /// `None` for a client that is not network booting (e.g. the initrd's own DHCP).
    pub boot_file: Option<BootFile>,
    /// The server clients fetch from (siaddr, TFTP and HTTP).
    pub next_server: Ipv4Addr,
}

/// Decides how to boot `client` from the server link `link` (`links::choose`); `None` means
/// it is not ours. A pool that boots over IPv6 only (`boot_over: ipv6`) gets an address from
/// DHCPv4 and no boot file.
pub fn plan<'a>(config: &'a Config, client: &Client, link: Ipv4Addr) -> Option<Plan<'a>> {
    let member = config.member(client.mac)?.on_arch(client.arch);
    let boot_file = if member.pool.boot_over.v4() {
        boot_file(config, &member, client, link.into())
    } else {
        None
    };
    Some(Plan {
        member,
        boot_file,
        next_server: link,
    })
}

/// What DHCPv6 tells `client`: its pool, and the boot file as the URL of option 59 (RFC 5970),
/// from the same choice as `plan` with the server's IPv6 address: a TFTP loader becomes
/// `tftp://[ADDR]/NAME`. `None`: not ours; no URL: not booting, or not over IPv6.
pub fn plan6<'a>(
    config: &'a Config,
    client: &Client,
    server: Ipv6Addr,
) -> Option<(Member<'a>, Option<String>)> {
    let member = config.member(client.mac)?.on_arch(client.arch);
    let url = if member.pool.boot_over.v6() {
        boot_file(config, &member, client, server.into()).map(|f| match f {
            BootFile::Tftp(name) => format!("tftp://[{server}]/{name}"),
            BootFile::Url(url) => url,
        })
    } else {
        None
    };
    Some((member, url))
}

/// The boot file for `client` of `member`'s pool, fetched from `server`: the one policy of
/// both IP versions.
fn boot_file(
    config: &Config,
    member: &Member,
    client: &Client,
    server: IpAddr,
) -> Option<BootFile> {
    if !client.pxe && !client.ipxe {
        None
    } else if client.ipxe {
        Some(BootFile::Url(script::script_url(
            config, client.mac, server,
        )))
    } else {
        // HTTP boot firmware says so in option 60 and with its own architecture types.
        let http = client.http
            || matches!(
                client.arch,
                Some(
                    arch::EFI_IA32_HTTP
                        | arch::EFI_X64_HTTP
                        | arch::EFI_ARM32_HTTP
                        | arch::EFI_ARM64_HTTP
                )
            );
        // HTTP boot is UEFI only; BIOS is the guess only for a PXE ROM that did not say.
        let fallback = if http { arch::EFI_X64_HTTP } else { arch::BIOS };
        let loader = loader_for(client.arch.unwrap_or(fallback));
        // Secure Boot firmware runs only what its keys signed: Debian's shim (signed by
        // Microsoft's UEFI CA), then its signed GRUB, which fetches over TFTP only.
        let signed = member.pool.secure_boot
            && !http
            && matches!(client.arch, Some(arch::EFI_BC | arch::EFI_X64));
        if signed {
            Some(BootFile::Tftp(grub::SHIM.to_string()))
        } else if !http && client.arch == Some(arch::EFI_ARM64) {
            // Debian ships no arm64 iPXE: its network GRUB reads `grub::config` instead.
            Some(BootFile::Tftp(grub::GRUB_ARM64.to_string()))
        } else if http {
            Some(BootFile::Url(format!(
                "{}/boot/loaders/{loader}",
                script::http_base_at(config, server)
            )))
        } else {
            Some(BootFile::Tftp(loader.to_string()))
        }
    }
}

/// Every loader name `loader_for` can hand out.
pub const LOADERS: [&str; 4] = [
    "undionly.kpxe",
    "ipxe-arm64.efi",
    "ipxe-i386.efi",
    "snponly.efi",
];

/// The iPXE build for a firmware architecture (names as Debian's `ipxe` package ships them).
/// x64 UEFI gets `snponly.efi`: it drives the NIC through the firmware's own network stack,
/// which loaded it, so it works on any NIC the firmware can boot from, and at 170 KiB it
/// loads five times faster than `ipxe.efi` (which Debian ships as a symlink out of its folder).
pub fn loader_for(arch: u16) -> &'static str {
    match arch {
        arch::BIOS => "undionly.kpxe",
        arch::EFI_ARM64 | arch::EFI_ARM64_HTTP => "ipxe-arm64.efi",
        arch::EFI_IA32 | arch::EFI_IA32_HTTP => "ipxe-i386.efi",
        _ => "snponly.efi",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    pub(crate) const CONFIG: &str = "\
server: { address: 10.77.0.1, http: 0.0.0.0:8080 }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }
images:
  demo: { dir: images/demo }
pools:
  room:
    image: demo
    root: nbd
    cmdline: console=ttyS0
    clients:
      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:ff\" }
";

    /// `CONFIG` with an ARM64 image beside `demo` and the pool's `arch.arm64` naming it.
    pub(crate) fn mixed() -> String {
        CONFIG
            .replace(
                "  demo: { dir: images/demo }\n",
                "  demo: { dir: images/demo }\n  demo-arm64: { dir: images/demo-arm64 }\n",
            )
            .replace(
                "    cmdline: console=ttyS0\n",
                "    cmdline: console=ttyS0\n    arch: { arm64: { image: demo-arm64, cmdline: console=ttyAMA0 } }\n",
            )
    }

    fn client(mac: &str, arch: Option<u16>, ipxe: bool, pxe: bool) -> Client {
        Client {
            mac: mac.parse().unwrap(),
            arch,
            ipxe,
            pxe,
            http: false,
        }
    }

    #[test]
    fn every_loader_handed_out_is_listed() {
        for arch in 0..=40 {
            assert!(LOADERS.contains(&loader_for(arch)), "arch {arch}");
        }
    }

    #[test]
    fn firmware_gets_a_loader_per_architecture() {
        let c = Config::parse(Path::new("p.yaml"), CONFIG).unwrap();
        let file = |arch| {
            plan(
                &c,
                &client("52:54:00:77:00:01", arch, false, true),
                c.server.address,
            )
            .unwrap()
            .boot_file
        };
        assert_eq!(file(Some(0)), Some(BootFile::Tftp("undionly.kpxe".into())));
        assert_eq!(file(None), Some(BootFile::Tftp("undionly.kpxe".into())));
        assert_eq!(file(Some(7)), Some(BootFile::Tftp("snponly.efi".into())));
        assert_eq!(
            file(Some(16)),
            Some(BootFile::Url(
                "http://10.77.0.1:8080/boot/loaders/snponly.efi".into()
            ))
        );
    }

    #[test]
    fn uefi_http_boot_gets_a_url_by_class_or_architecture() {
        let c = Config::parse(Path::new("p.yaml"), CONFIG).unwrap();
        let http = |arch, class| {
            let mut cl = client("52:54:00:77:00:02", arch, false, true);
            cl.http = class;
            plan(&c, &cl, c.server.address).unwrap().boot_file
        };
        let url = |loader: &str| {
            Some(BootFile::Url(format!(
                "http://10.77.0.1:8080/boot/loaders/{loader}"
            )))
        };
        // Option 60 HTTPClient alone is enough, whatever option 93 says or omits.
        assert_eq!(http(Some(16), true), url("snponly.efi"));
        assert_eq!(http(None, true), url("snponly.efi"));
        assert_eq!(http(Some(19), true), url("ipxe-arm64.efi"));
        assert_eq!(http(Some(15), false), url("ipxe-i386.efi"));
        // A PXE client of the same architecture family stays on TFTP.
        assert_eq!(
            http(Some(9), false),
            Some(BootFile::Tftp("snponly.efi".into()))
        );
        // iPXE over HTTP boot still gets its script, not a loader.
        let mut cl = client("52:54:00:77:00:02", Some(16), true, true);
        cl.http = true;
        assert_eq!(
            plan(&c, &cl, c.server.address).unwrap().boot_file,
            Some(BootFile::Url(
                "http://10.77.0.1:8080/boot/script/52:54:00:77:00:02.ipxe".into()
            ))
        );
    }

    /// A `secure_boot` pool's x64 UEFI firmware gets the signed shim over TFTP; its BIOS
    /// machines and its iPXE keep their usual answers.
    #[test]
    fn secure_boot_firmware_gets_the_signed_shim() {
        let text = CONFIG.replace(
            "    cmdline: console=ttyS0\n",
            "    cmdline: console=ttyS0\n    secure_boot: true\n",
        );
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let file = |arch, ipxe| {
            plan(
                &c,
                &client("52:54:00:77:00:01", arch, ipxe, true),
                c.server.address,
            )
            .unwrap()
            .boot_file
        };
        let shim = Some(BootFile::Tftp("shimx64.efi".into()));
        assert_eq!(file(Some(7), false), shim);
        assert_eq!(file(Some(9), false), shim);
        assert_eq!(
            file(Some(0), false),
            Some(BootFile::Tftp("undionly.kpxe".into()))
        );
        assert!(matches!(file(Some(7), true), Some(BootFile::Url(u)) if u.ends_with(".ipxe")));
        // Without the key the same firmware gets iPXE, which Secure Boot refuses to run.
        let plain = Config::parse(Path::new("p.yaml"), CONFIG).unwrap();
        assert_eq!(
            plan(
                &plain,
                &client("52:54:00:77:00:01", Some(7), false, true),
                plain.server.address
            )
            .unwrap()
            .boot_file,
            Some(BootFile::Tftp("snponly.efi".into()))
        );
    }

    /// ARM64 UEFI firmware's PXE gets Debian's network GRUB (there is no arm64 iPXE in Debian),
    /// in a pool with or without `secure_boot`; its HTTP boot keeps the iPXE name.
    #[test]
    fn arm64_firmware_gets_the_network_grub() {
        let c = Config::parse(Path::new("p.yaml"), CONFIG).unwrap();
        let mut cl = client("52:54:00:77:00:01", Some(arch::EFI_ARM64), false, true);
        let grub = Some(BootFile::Tftp("grubaa64.efi".into()));
        assert_eq!(plan(&c, &cl, c.server.address).unwrap().boot_file, grub);
        let sb = CONFIG.replace(
            "    cmdline: console=ttyS0\n",
            "    cmdline: console=ttyS0\n    secure_boot: true\n",
        );
        let sb = Config::parse(Path::new("p.yaml"), &sb).unwrap();
        assert_eq!(plan(&sb, &cl, sb.server.address).unwrap().boot_file, grub);
        cl.arch = Some(arch::EFI_ARM64_HTTP);
        cl.http = true;
        assert_eq!(
            plan(&c, &cl, c.server.address).unwrap().boot_file,
            Some(BootFile::Url(
                "http://10.77.0.1:8080/boot/loaders/ipxe-arm64.efi".into()
            ))
        );
    }

    /// DHCPv6 gets the same choice as DHCPv4, as a URL on the server's IPv6 address; a pool
    /// that boots over IPv6 only gets no boot file from DHCPv4.
    #[test]
    fn ipv6_clients_get_the_same_loader_as_a_url() {
        let text = CONFIG.replace(
            "server: { address: 10.77.0.1,",
            "dhcp6: { subnet: \"fd77::/64\", range: \"fd77::100-fd77::1ff\", router_advertisements: leave }\nserver: { address: 10.77.0.1, address6: \"fd77::1\",",
        );
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let six: Ipv6Addr = "fd77::1".parse().unwrap();
        let url = |cl: &Client| plan6(&c, cl, six).unwrap().1;
        let mut http = client("52:54:00:77:00:01", Some(16), false, true);
        http.http = true;
        assert_eq!(
            url(&http).as_deref(),
            Some("http://[fd77::1]:8080/boot/loaders/snponly.efi")
        );
        let pxe = client("52:54:00:77:00:01", Some(7), false, true);
        assert_eq!(url(&pxe).as_deref(), Some("tftp://[fd77::1]/snponly.efi"));
        let ipxe = client("52:54:00:77:00:01", Some(7), true, true);
        assert_eq!(
            url(&ipxe).as_deref(),
            Some("http://[fd77::1]:8080/boot/script/52:54:00:77:00:01.ipxe")
        );
        assert_eq!(url(&client("52:54:00:77:00:01", None, false, false)), None);
        assert!(plan6(&c, &client("52:54:00:78:00:01", Some(7), false, true), six).is_none());
        let only6 = text.replace("    root: nbd\n", "    root: nbd\n    boot_over: ipv6\n");
        let c6 = Config::parse(Path::new("p.yaml"), &only6).unwrap();
        assert_eq!(plan(&c6, &pxe, c6.server.address).unwrap().boot_file, None);
        assert!(plan6(&c6, &pxe, six).unwrap().1.is_some());
        let only4 = text.replace("    root: nbd\n", "    root: nbd\n    boot_over: ipv4\n");
        let c4 = Config::parse(Path::new("p.yaml"), &only4).unwrap();
        assert_eq!(plan6(&c4, &pxe, six).unwrap().1, None);
        assert!(
            plan(&c4, &pxe, c4.server.address)
                .unwrap()
                .boot_file
                .is_some()
        );
    }

    #[test]
    fn ipxe_gets_its_script_and_never_a_loader_again() {
        let c = Config::parse(Path::new("p.yaml"), CONFIG).unwrap();
        let p = plan(
            &c,
            &client("52:54:00:77:00:01", Some(0), true, true),
            c.server.address,
        )
        .unwrap();
        assert_eq!(
            p.boot_file,
            Some(BootFile::Url(
                "http://10.77.0.1:8080/boot/script/52:54:00:77:00:01.ipxe".into()
            ))
        );
    }

    #[test]
    fn strangers_and_plain_dhcp() {
        let c = Config::parse(Path::new("p.yaml"), CONFIG).unwrap();
        assert!(
            plan(
                &c,
                &client("52:54:00:78:00:01", Some(0), false, true),
                c.server.address
            )
            .is_none()
        );
        let p = plan(
            &c,
            &client("52:54:00:77:00:01", None, false, false),
            c.server.address,
        )
        .unwrap();
        assert_eq!(p.boot_file, None);
    }
}
