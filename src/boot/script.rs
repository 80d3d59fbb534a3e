//! The generated iPXE script and kernel command line for one client. `link` is the server
//! address the client was given for its whole boot (one of `server.links`, `steer::choice`):
//! every URL and the root argument name it. `image` is the image this boot is served, which
//! the caller resolved (`image::serve::for_boot`: the revision active when the script is made,
//! with its root's wire copy once that is made): its kernel, initrd and root names all carry
//! it, and nothing here reads the disk.

use super::addition;
use crate::config::{Config, Image, Initramfs, Mac, Member, RootProto, cmdline};
use std::net::{IpAddr, Ipv4Addr};

/// Where iPXE fetches this client's script.
pub fn script_url(config: &Config, mac: Mac, server: IpAddr) -> String {
    format!("{}/boot/script/{mac}.ipxe", http_base_at(config, server))
}

/// `http://LINK:PORT` as clients reach the server.
pub fn http_base(config: &Config, link: Ipv4Addr) -> String {
    http_base_at(config, link.into())
}

/// `http://ADDR:PORT`, or `http://[ADDR6]:PORT` over IPv6.
pub fn http_base_at(config: &Config, server: IpAddr) -> String {
    let port = config.server.http.port();
    match server {
        IpAddr::V4(a) => format!("http://{a}:{port}"),
        IpAddr::V6(a) => format!("http://[{a}]:{port}"),
    }
}

/// The kernel command line for `image` (the image this boot is served): the root argument in
/// the pool's initramfs syntax (with the overlay addition's argument when the pool hands it,
/// `boot::addition`), where to report "booted", then the pool's own arguments and
/// `netconsole=`, then the EFI stub's `initrd=` for each initrd; or the pool's
/// `cmdline_template` filled in. `client` is the client's leased address (for `netconsole=`),
/// if it has one.
pub fn cmdline(
    config: &Config,
    member: &Member,
    image: &Image,
    link: Ipv4Addr,
    client: Option<Ipv4Addr>,
) -> String {
    let pool = member.pool;
    let s = &config.server;
    let (nfs, nbd) = (&image.nfs_export, &image.nbd_export);
    // An NFS root is read-only; the pool's `nfs_options` (default `nocto`) follow.
    let ro = match pool.nfs_options.as_str() {
        "" => "ro".to_string(),
        options => format!("ro,{options}"),
    };
    let root = match (pool.root, pool.initramfs) {
        // The demo's own initrd reads dracut's syntax.
        (RootProto::Nfs, Initramfs::Dracut | Initramfs::Bootpool) => {
            format!(
                "root=nfs:{link}:{nfs}:{ro},port={},mountport={}",
                s.ports.nfs, s.ports.nfs
            )
        }
        // dracut (059) reads a PORT that is not a number as the export name on the default
        // port, and cannot take both: `PORT/NAME` goes to nbd-client as one name.
        (RootProto::Nbd, Initramfs::Dracut | Initramfs::Bootpool)
            if s.ports.nbd == crate::proto::nbd::PORT =>
        {
            format!("root=nbd:{link}:{nbd}")
        }
        (RootProto::Nbd, Initramfs::Dracut | Initramfs::Bootpool) => {
            format!("root=nbd:{link}:{}/{nbd}", s.ports.nbd)
        }
        // `boot=` because an initrd built with Debian's default `BOOT=local` ignores
        // `root=/dev/nfs`; klibc's nfsmount takes no `mountport=` (it asks the portmapper).
        (RootProto::Nfs, Initramfs::InitramfsTools) => format!(
            "boot={} root=/dev/nfs nfsroot={link}:{nfs},{ro},port={} ip=dhcp",
            addition::debian_boot(pool, "nfs"),
            s.ports.nfs
        ),
        // Debian's nbd script reads `SERVER,A,B` as server, export, device: the port goes
        // in its `SERVER:PORT/EXPORT` form.
        (RootProto::Nbd, Initramfs::InitramfsTools) => {
            format!(
                "boot={} root=/dev/nbd0 nbdroot={link}:{}/{nbd} ip=dhcp",
                addition::debian_boot(pool, "local"),
                s.ports.nbd
            )
        }
    };
    let root = match addition::argument(&pool.overlay) {
        overlay if overlay.is_empty() => root,
        overlay => format!("{root} {overlay}"),
    };
    let netconsole = netconsole(config, member, link, client);
    if let Some(template) = &pool.cmdline_template {
        return from_template(config, member, image, link, template, &root, &netconsole);
    }
    let mut line = format!("{root} bootpool.url={}", http_base(config, link));
    if !member.cmdline().is_empty() {
        line.push(' ');
        line.push_str(member.cmdline());
    }
    if !netconsole.is_empty() {
        line.push(' ');
        line.push_str(&netconsole);
    }
    // The EFI stub finds each initrd iPXE hands over by this name (its URL's last part).
    line.push_str(&efi_initrds(member, image));
    line
}

/// The EFI stub's ` initrd=NAME` for the image's initrd, and for the addition after it when
/// the pool hands it (`grub::config` takes them off again: GRUB hands initrds over itself).
pub fn efi_initrds(member: &Member, image: &Image) -> String {
    let mut names = format!(" initrd={}", image.initrd_file_name());
    if addition::handed(member.pool) {
        names.push_str(" initrd=");
        names.push_str(addition::NAME);
    }
    names
}

/// The kernel's `netconsole=[src-port]@[src-ip]/[dev],[tgt-port]@tgt-ip/[tgt-mac]`
/// (Documentation/networking/netconsole.rst) for a pool with `netconsole` on, else empty. The
/// source address is given, so netpoll needs only the NIC, not its configured address (the
/// module may load before the initrd's DHCP); the target MAC is left out (broadcast).
pub fn netconsole(
    config: &Config,
    member: &Member,
    link: Ipv4Addr,
    client: Option<Ipv4Addr>,
) -> String {
    let crate::config::Netconsole::On(dev) = &member.pool.netconsole else {
        return String::new();
    };
    format!(
        "netconsole=@{}/{},{}@{link}/",
        client.map(|c| c.to_string()).unwrap_or_default(),
        dev.as_deref().unwrap_or(""),
        config.server.ports.console
    )
}

/// A pool's own whole command line: its template with each placeholder filled in for this
/// client (`root` is the root argument bootpool would have written).
fn from_template(
    config: &Config,
    member: &Member,
    image: &Image,
    link: Ipv4Addr,
    template: &cmdline::Template,
    root: &str,
    netconsole: &str,
) -> String {
    use cmdline::Field;
    let pool = member.pool;
    let ports = &config.server.ports;
    template.render(|field| match field {
        Field::Server => link.to_string(),
        Field::Http => http_base(config, link),
        Field::HttpPort => config.server.http.port().to_string(),
        Field::Root => root.to_string(),
        Field::Export => match pool.root {
            RootProto::Nfs => image.nfs_export.clone(),
            RootProto::Nbd => image.nbd_export.clone(),
        },
        Field::Port => match pool.root {
            RootProto::Nfs => ports.nfs.to_string(),
            RootProto::Nbd => ports.nbd.to_string(),
        },
        Field::NfsExport => image.nfs_export.clone(),
        Field::NfsPort => ports.nfs.to_string(),
        Field::NbdExport => image.nbd_export.clone(),
        Field::NbdPort => ports.nbd.to_string(),
        Field::PortmapPort => ports.portmap.to_string(),
        Field::Image => image.name.clone(),
        Field::Pool => pool.name.clone(),
        Field::Initrd => image.initrd_file_name().to_string(),
        Field::Cmdline => member.cmdline().to_string(),
        Field::Netconsole => netconsole.to_string(),
    })
}

/// The iPXE script for one client. `files`: where it fetches its kernel and initrd (its link,
/// or the server's IPv6 address for a client that asked over IPv6); the root and the report
/// URL stay on `link`.
pub fn ipxe_script(
    config: &Config,
    member: &Member,
    image: &Image,
    mac: Mac,
    link: Ipv4Addr,
    client: Option<Ipv4Addr>,
    files: IpAddr,
) -> String {
    let base = http_base_at(config, files);
    let name = member.entry.name.as_deref().unwrap_or("");
    // The addition after the image's own initrd: the kernel unpacks both into one rootfs, the
    // later over the earlier.
    let addition = if addition::handed(member.pool) {
        format!("initrd {base}/boot/loaders/{}\n", addition::NAME)
    } else {
        String::new()
    };
    format!(
        "#!ipxe\n\
         echo bootpool: pool {pool} client {mac} {name}\n\
         kernel {base}/boot/{image}/{kernel} {cmdline}\n\
         initrd {base}/boot/{image}/{initrd}\n\
         {addition}\
         boot\n",
        pool = member.pool.name,
        image = image.name,
        kernel = image.kernel_name,
        initrd = image.initrd_name,
        cmdline = cmdline(config, member, image, link, client),
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
        let s = ipxe_script(
            &c,
            &m,
            m.image(),
            mac,
            c.server.address,
            None,
            c.server.address.into(),
        );
        assert!(s.starts_with("#!ipxe\n"));
        assert!(s.contains("kernel http://10.77.0.1:8080/boot/demo/vmlinuz root=nbd:10.77.0.1:demo bootpool.url=http://10.77.0.1:8080 console=ttyS0 initrd=initrd.img\n"), "{s}");
        assert!(s.contains("initrd http://10.77.0.1:8080/boot/demo/initrd.img\n"));
    }

    /// A pool with `netconsole` on sends the kernel's log to the console port of its link.
    #[test]
    fn netconsole_names_the_client_the_port_and_the_link() {
        let on = super::super::tests::CONFIG.replace(
            "    cmdline: console=ttyS0\n",
            "    cmdline: console=ttyS0\n    netconsole: true\n",
        );
        let c = Config::parse(Path::new("p.yaml"), &on).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        let link = Ipv4Addr::new(10, 77, 0, 3);
        let client = Some(Ipv4Addr::new(10, 77, 0, 150));
        assert!(
            cmdline(&c, &m, m.image(), link, client).ends_with(
                " console=ttyS0 netconsole=@10.77.0.150/,6666@10.77.0.3/ initrd=initrd.img"
            ),
            "{}",
            cmdline(&c, &m, m.image(), link, client)
        );
        let dev = on.replace("netconsole: true", "netconsole: enp1s0");
        let c = Config::parse(Path::new("p.yaml"), &dev).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert!(
            cmdline(&c, &m, m.image(), link, None)
                .contains(" netconsole=@/enp1s0,6666@10.77.0.3/ ")
        );
        let t = dev.replace(
            "    netconsole: enp1s0\n",
            "    netconsole: enp1s0\n    cmdline_template: \"{root} {netconsole} {cmdline}\"\n",
        );
        let c = Config::parse(Path::new("p.yaml"), &t).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert_eq!(
            cmdline(&c, &m, m.image(), link, client),
            "root=nbd:10.77.0.3:demo netconsole=@10.77.0.150/enp1s0,6666@10.77.0.3/ console=ttyS0"
        );
        // Off (the default): nothing, also for the placeholder.
        let c = Config::parse(Path::new("p.yaml"), super::super::tests::CONFIG).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert!(!cmdline(&c, &m, m.image(), link, client).contains("netconsole"));
        let bad = on.replace("netconsole: true", "netconsole: \"eth 0\"");
        let e = Config::parse(Path::new("p.yaml"), &bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("netconsole") && e.contains("not an interface name"),
            "{e}"
        );
    }

    /// A pool that writes its whole command line gets exactly its template, filled in.
    #[test]
    fn a_pools_template_is_the_whole_command_line() {
        let text = super::super::tests::CONFIG.replace(
            "    cmdline: console=ttyS0\n",
            "    cmdline: console=ttyS0\n    cmdline_template: \"netroot=nbd:{server}:{port}:{export} report={http}/api/v1/booted img={image}/{pool} {cmdline} initrd={initrd} {{x}}\"\n",
        );
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        let link = Ipv4Addr::new(10, 77, 0, 3);
        assert_eq!(
            cmdline(&c, &m, m.image(), link, None),
            "netroot=nbd:10.77.0.3:10809:demo report=http://10.77.0.3:8080/api/v1/booted img=demo/room console=ttyS0 initrd=initrd.img {x}"
        );
        let root = text.replace("netroot=nbd:{server}:{port}:{export}", "{root} nfs={nfs_export}:{nfs_port} pm={portmap_port} nbd={nbd_export}:{nbd_port} http={http_port}");
        let c = Config::parse(Path::new("p.yaml"), &root).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert!(
            cmdline(&c, &m, m.image(), c.server.address, None).starts_with(
                "root=nbd:10.77.0.1:demo nfs=/demo:2049 pm=111 nbd=demo:10809 http=8080 report="
            ),
            "{}",
            cmdline(&c, &m, m.image(), c.server.address, None)
        );
    }

    /// An image that names its files and exports is fetched and rooted by those names.
    #[test]
    fn an_images_own_names_go_into_the_script_and_the_root_argument() {
        let text = super::super::tests::CONFIG.replace(
            "demo: { dir: images/demo }",
            "demo: { dir: images/demo, kernel: boot/bzImage, initrd: boot/initramfs.gz, nfs_export: /srv/deb, nbd_export: deb-root }",
        );
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let m = c.member(mac).unwrap();
        let s = ipxe_script(
            &c,
            &m,
            m.image(),
            mac,
            c.server.address,
            None,
            c.server.address.into(),
        );
        assert!(
            s.contains(
                "kernel http://10.77.0.1:8080/boot/demo/boot/bzImage root=nbd:10.77.0.1:deb-root "
            ),
            "{s}"
        );
        assert!(s.contains(" initrd=initramfs.gz\n"), "{s}");
        assert!(
            s.contains("initrd http://10.77.0.1:8080/boot/demo/boot/initramfs.gz\n"),
            "{s}"
        );
        let nfs =
            Config::parse(Path::new("p.yaml"), &text.replace("root: nbd", "root: nfs")).unwrap();
        let m = nfs.member(mac).unwrap();
        assert!(
            cmdline(&nfs, &m, m.image(), nfs.server.address, None)
                .starts_with("root=nfs:10.77.0.1:/srv/deb:ro,")
        );
    }

    /// A family's `arch` entry gives its script that image's files, root and command line
    /// (also as a template's `{cmdline}`); other families keep the pool's.
    #[test]
    fn an_architectures_image_and_command_line_go_into_its_script() {
        let text = super::super::tests::mixed();
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let arm = c
            .member(mac)
            .unwrap()
            .on_arch(Some(crate::proto::dhcp::arch::EFI_ARM64_HTTP));
        let s = ipxe_script(
            &c,
            &arm,
            arm.image(),
            mac,
            c.server.address,
            None,
            c.server.address.into(),
        );
        assert!(
            s.contains("kernel http://10.77.0.1:8080/boot/demo-arm64/vmlinuz root=nbd:10.77.0.1:demo-arm64 bootpool.url=http://10.77.0.1:8080 console=ttyAMA0 initrd=initrd.img\n"),
            "{s}"
        );
        assert!(
            s.contains("initrd http://10.77.0.1:8080/boot/demo-arm64/initrd.img\n"),
            "{s}"
        );
        let x64 = c
            .member(mac)
            .unwrap()
            .on_arch(Some(crate::proto::dhcp::arch::EFI_BC));
        let s = ipxe_script(
            &c,
            &x64,
            x64.image(),
            mac,
            c.server.address,
            None,
            c.server.address.into(),
        );
        assert!(
            s.contains("/boot/demo/vmlinuz root=nbd:10.77.0.1:demo "),
            "{s}"
        );
        assert!(s.contains(" console=ttyS0 "), "{s}");
        let t = text.replace(
            "    cmdline: console=ttyS0\n",
            "    cmdline: console=ttyS0\n    cmdline_template: \"{root} {cmdline}\"\n",
        );
        let c = Config::parse(Path::new("p.yaml"), &t).unwrap();
        let arm = c
            .member(mac)
            .unwrap()
            .on_arch(Some(crate::proto::dhcp::arch::EFI_ARM64));
        assert_eq!(
            cmdline(&c, &arm, arm.image(), c.server.address, None),
            "root=nbd:10.77.0.1:demo-arm64 console=ttyAMA0"
        );
    }

    /// A stock initrd's pool hands the addition after the image's initrd (iPXE's second
    /// `initrd`, the EFI stub's second `initrd=`) with the overlay's argument; the demo's own
    /// initrd and `overlay: off` get neither.
    #[test]
    fn stock_initrds_get_the_overlay_addition_after_their_own() {
        let script_of = |text: &str| {
            let c = Config::parse(Path::new("p.yaml"), text).unwrap();
            let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
            let m = c.member(mac).unwrap();
            ipxe_script(
                &c,
                &m,
                m.image(),
                mac,
                c.server.address,
                None,
                c.server.address.into(),
            )
        };
        let dracut =
            super::super::tests::CONFIG.replace("root: nbd", "root: nbd\n    initramfs: dracut");
        let s = script_of(&dracut);
        assert!(
            s.contains(
                " root=nbd:10.77.0.1:demo bootpool.overlay=tmpfs bootpool.url=http://10.77.0.1:8080 console=ttyS0 initrd=initrd.img initrd=bootpool-overlay.cpio\n\
                 initrd http://10.77.0.1:8080/boot/demo/initrd.img\n\
                 initrd http://10.77.0.1:8080/boot/loaders/bootpool-overlay.cpio\n\
                 boot\n"
            ),
            "{s}"
        );
        let sized = dracut.replace(
            "initramfs: dracut",
            "initramfs: dracut\n    overlay: { tmpfs: 2g }",
        );
        assert!(script_of(&sized).contains(" root=nbd:10.77.0.1:demo bootpool.overlay=tmpfs:2g "));
        let disk = dracut.replace(
            "initramfs: dracut",
            "initramfs: dracut\n    overlay: { disk: /dev/sda3 }",
        );
        assert!(script_of(&disk).contains(" bootpool.overlay=disk:/dev/sda3 "));
        for plain in [
            super::super::tests::CONFIG.to_string(),
            dracut.replace("initramfs: dracut", "initramfs: dracut\n    overlay: off"),
        ] {
            let s = script_of(&plain);
            assert!(
                !s.contains("bootpool-overlay") && !s.contains("bootpool.overlay"),
                "{s}"
            );
            assert!(s.contains(" initrd=initrd.img\ninitrd "), "{s}");
        }
    }

    /// A client given another of the server's links hears only that address.
    #[test]
    fn every_url_and_the_root_name_the_clients_link() {
        let c = Config::parse(Path::new("p.yaml"), super::super::tests::CONFIG).unwrap();
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let m = c.member(mac).unwrap();
        let link = Ipv4Addr::new(10, 77, 0, 3);
        let s = ipxe_script(&c, &m, m.image(), mac, link, None, link.into());
        assert_eq!(s.matches("10.77.0.3").count(), 4, "{s}");
        assert!(!s.contains("10.77.0.1"), "{s}");
        assert_eq!(
            script_url(&c, mac, link.into()),
            "http://10.77.0.3:8080/boot/script/52:54:00:77:00:02.ipxe"
        );
    }

    #[test]
    fn nfs_roots_in_both_syntaxes() {
        let text = super::super::tests::CONFIG.replace("root: nbd", "root: nfs");
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert!(
            cmdline(&c, &m, m.image(), c.server.address, None)
                .starts_with("root=nfs:10.77.0.1:/demo:ro,nocto,port=2049,mountport=2049 ")
        );
        let tools = text.replace("root: nfs", "root: nfs\n    initramfs: initramfs-tools");
        let c = Config::parse(Path::new("p.yaml"), &tools).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert!(
            cmdline(&c, &m, m.image(), c.server.address, None).starts_with(
                "boot=bootpool root=/dev/nfs nfsroot=10.77.0.1:/demo,ro,nocto,port=2049 ip=dhcp bootpool.overlay=tmpfs "
            )
        );
        // Without the overlay addition, Debian's own boot script.
        let off = tools.replace("root: nfs", "root: nfs\n    overlay: off");
        let c = Config::parse(Path::new("p.yaml"), &off).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert!(
            cmdline(&c, &m, m.image(), c.server.address, None).starts_with(
                "boot=nfs root=/dev/nfs nfsroot=10.77.0.1:/demo,ro,nocto,port=2049 ip=dhcp bootpool.url="
            )
        );
        // The pool's own options replace the default; none at all leaves `ro`.
        let line = |options: &str| {
            let text = text.replace(
                "root: nfs",
                &format!("root: nfs\n    nfs_options: {options}"),
            );
            let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
            let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
            cmdline(&c, &m, m.image(), c.server.address, None)
        };
        assert!(
            line("\"actimeo=600,nocto\"")
                .starts_with("root=nfs:10.77.0.1:/demo:ro,actimeo=600,nocto,port=2049,")
        );
        assert!(line("\"\"").starts_with("root=nfs:10.77.0.1:/demo:ro,port=2049,"));
    }

    /// Each syntax as its own scripts read it (dracut 059's nbdroot.sh and Debian's nbd-client
    /// initramfs script; both boot in tests/it/e2e_stock.rs).
    #[test]
    fn nbd_roots_in_both_syntaxes() {
        let cmdline_of = |text: &str| {
            let c = Config::parse(Path::new("p.yaml"), text).unwrap();
            let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
            cmdline(&c, &m, m.image(), c.server.address, None)
        };
        let text = super::super::tests::CONFIG;
        assert!(cmdline_of(text).starts_with("root=nbd:10.77.0.1:demo "));
        let moved = text.replace(
            "http: 0.0.0.0:8080",
            "http: 0.0.0.0:8080, ports: { nbd: 10900 }",
        );
        assert!(cmdline_of(&moved).starts_with("root=nbd:10.77.0.1:10900/demo "));
        let tools = text.replace("root: nbd", "root: nbd\n    initramfs: initramfs-tools");
        assert!(cmdline_of(&tools).starts_with(
            "boot=bootpool root=/dev/nbd0 nbdroot=10.77.0.1:10809/demo ip=dhcp bootpool.overlay=tmpfs "
        ));
        let off = tools.replace("root: nbd", "root: nbd\n    overlay: off");
        assert!(
            cmdline_of(&off)
                .starts_with("boot=local root=/dev/nbd0 nbdroot=10.77.0.1:10809/demo ip=dhcp ")
        );
    }
}
