//! The generated iPXE script and kernel command line for one client.

use crate::config::{Config, Initramfs, Mac, Member, RootProto};

/// Where iPXE fetches this client's script.
pub fn script_url(config: &Config, mac: Mac) -> String {
    format!("{}/boot/script/{mac}.ipxe", http_base(config))
}

/// `http://ADDRESS:PORT` as clients reach the server.
pub fn http_base(config: &Config) -> String {
    format!(
        "http://{}:{}",
        config.server.address,
        config.server.http.port()
    )
}

/// The kernel command line: the root argument in the pool's initramfs syntax, where to report
/// "booted", then the pool's own arguments.
pub fn cmdline(config: &Config, member: &Member) -> String {
    let pool = member.pool;
    let s = &config.server;
    let image = &pool.image.name;
    let root = match (pool.root, pool.initramfs) {
        (RootProto::Nfs, Initramfs::Dracut) => {
            format!(
                "root=nfs:{}:/{image}:ro,port={},mountport={}",
                s.address, s.ports.nfs, s.ports.nfs
            )
        }
        // dracut (059) reads a PORT that is not a number as the export name on the default
        // port, and cannot take both: `PORT/NAME` goes to nbd-client as one name.
        (RootProto::Nbd, Initramfs::Dracut) if s.ports.nbd == crate::proto::nbd::PORT => {
            format!("root=nbd:{}:{image}", s.address)
        }
        (RootProto::Nbd, Initramfs::Dracut) => {
            format!("root=nbd:{}:{}/{image}", s.address, s.ports.nbd)
        }
        // `boot=` because an initrd built with Debian's default `BOOT=local` ignores
        // `root=/dev/nfs`; klibc's nfsmount takes no `mountport=` (it asks the portmapper).
        (RootProto::Nfs, Initramfs::InitramfsTools) => format!(
            "boot=nfs root=/dev/nfs nfsroot={}:/{image},ro,port={} ip=dhcp",
            s.address, s.ports.nfs
        ),
        // Debian's nbd script reads `SERVER,A,B` as server, export, device: the port goes
        // in its `SERVER:PORT/EXPORT` form.
        (RootProto::Nbd, Initramfs::InitramfsTools) => {
            format!(
                "boot=local root=/dev/nbd0 nbdroot={}:{}/{image} ip=dhcp",
                s.address, s.ports.nbd
            )
        }
    };
    let mut line = format!("{root} bootpool.url={}", http_base(config));
    if !pool.cmdline.is_empty() {
        line.push(' ');
        line.push_str(&pool.cmdline);
    }
    // The EFI stub finds the initrd iPXE hands over by this name.
    line.push_str(" initrd=initrd.img");
    line
}

/// The iPXE script for one client.
pub fn ipxe_script(config: &Config, member: &Member, mac: Mac) -> String {
    let base = http_base(config);
    let image = &member.pool.image.name;
    let name = member.entry.name.as_deref().unwrap_or("");
    format!(
        "#!ipxe\n\
         echo bootpool: pool {pool} client {mac} {name}\n\
         kernel {base}/boot/{image}/vmlinuz {cmdline}\n\
         initrd {base}/boot/{image}/initrd.img\n\
         boot\n",
        pool = member.pool.name,
        cmdline = cmdline(config, member),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn scripts_name_kernel_initrd_and_root() {
        let c = Config::parse(Path::new("p.yaml"), super::super::tests::CONFIG).unwrap();
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let m = c.member(mac).unwrap();
        let s = ipxe_script(&c, &m, mac);
        assert!(s.starts_with("#!ipxe\n"));
        assert!(s.contains("kernel http://10.77.0.1:8080/boot/demo/vmlinuz root=nbd:10.77.0.1:demo bootpool.url=http://10.77.0.1:8080 console=ttyS0 initrd=initrd.img\n"), "{s}");
        assert!(s.contains("initrd http://10.77.0.1:8080/boot/demo/initrd.img\n"));
    }

    #[test]
    fn nfs_roots_in_both_syntaxes() {
        let text = super::super::tests::CONFIG.replace("root: nbd", "root: nfs");
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert!(
            cmdline(&c, &m).starts_with("root=nfs:10.77.0.1:/demo:ro,port=2049,mountport=2049 ")
        );
        let text = text.replace("root: nfs", "root: nfs\n    initramfs: initramfs-tools");
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert!(
            cmdline(&c, &m).starts_with(
                "boot=nfs root=/dev/nfs nfsroot=10.77.0.1:/demo,ro,port=2049 ip=dhcp "
            )
        );
    }

    /// Each syntax as its own scripts read it (dracut 059's nbdroot.sh and Debian's nbd-client
    /// initramfs script; both boot in tests/e2e_stock.rs).
    #[test]
    fn nbd_roots_in_both_syntaxes() {
        let cmdline_of = |text: &str| {
            let c = Config::parse(Path::new("p.yaml"), text).unwrap();
            let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
            cmdline(&c, &m)
        };
        let text = super::super::tests::CONFIG;
        assert!(cmdline_of(text).starts_with("root=nbd:10.77.0.1:demo "));
        let moved = text.replace(
            "http: 0.0.0.0:8080",
            "http: 0.0.0.0:8080, ports: { nbd: 10900 }",
        );
        assert!(cmdline_of(&moved).starts_with("root=nbd:10.77.0.1:10900/demo "));
        let tools = text.replace("root: nbd", "root: nbd\n    initramfs: initramfs-tools");
        assert!(
            cmdline_of(&tools)
                .starts_with("boot=local root=/dev/nbd0 nbdroot=10.77.0.1:10809/demo ip=dhcp ")
        );
    }
}
