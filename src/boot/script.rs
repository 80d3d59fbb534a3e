//! The generated iPXE script and kernel command line for one client. `link` is the server
//! address the client was given for its whole boot (one of `server.links`, `steer::choice`):
//! every URL and the root argument name it. `image` is the image this boot is served, which
//! the caller resolved (`image::serve::for_boot`: the revision active when the script is made,
//! with its root's wire copy once that is made): its kernel, initrd and root names all carry
//! it, and nothing here reads the disk. A next boot an admin set (`boot::next`) is handed in
//! as data: `next_script` writes its local disk, memtest and menu scripts.

use super::addition;
use super::next::{self, Firmware, Target};
use crate::config::{Config, Image, Initramfs, Mac, Member, NbdVia, RootProto, cmdline};
use std::net::{IpAddr, Ipv4Addr};

/// Where the addition's hook starts the client agent (`dist/overlay/bootpool/agent.sh`), and
/// the export it serves, as Debian's nbd script takes them; dracut's takes the host and the
/// export, on NBD's default port (10809).
const AGENT_NBD: &str = "127.0.0.1:10809/root";
const AGENT_HOST: &str = "127.0.0.1";
const AGENT_EXPORT: &str = "root";

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
/// `boot::addition`), where to report "booted", the client's name (`systemd.hostname=`), then
/// the pool's own arguments and `netconsole=`, then the EFI stub's `initrd=` for each initrd;
/// or the pool's `cmdline_template` filled in. `client` is the client's leased address (for
/// `netconsole=`), if it has one.
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
        // Through the client agent, as for initramfs-tools below: the addition's netroot
        // hook starts it before dracut's nbdroot runs nbd-client against 127.0.0.1's default
        // port, export `root`.
        (RootProto::Nbd, Initramfs::Dracut)
            if pool.nbd_via == NbdVia::Agent && image.blocks.is_some() =>
        {
            format!(
                "root=nbd:{AGENT_HOST}:{AGENT_EXPORT} bootpool.blocks={}",
                blocks_sources(config, image, link)
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
        // Through the client agent the addition starts (`nbd: { via: agent }`), when the
        // root image has its block manifest: the kernel's NBD client attaches to the agent on
        // 127.0.0.1, which reads the root by the manifest's digest from this boot's server,
        // then from the site's other members that hold it.
        (RootProto::Nbd, Initramfs::InitramfsTools)
            if pool.nbd_via == NbdVia::Agent && image.blocks.is_some() =>
        {
            format!(
                "boot={} root=/dev/nbd0 nbdroot={AGENT_NBD} ip=dhcp bootpool.blocks={}",
                addition::debian_boot(pool, "local"),
                blocks_sources(config, image, link)
            )
        }
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
    // dracut configures no interface without `ip=` when its network module is
    // systemd-networkd (its choice for an image with systemd), and the root never comes.
    let mut root = match pool.initramfs {
        Initramfs::Dracut => format!("{root} ip=dhcp"),
        _ => root,
    };
    for argument in [
        addition::argument(&pool.overlay),
        addition::homes_arguments(pool.homes.as_ref()),
        addition::peers_argument(pool, image.blocks.is_some()),
    ] {
        if !argument.is_empty() {
            root.push(' ');
            root.push_str(&argument);
        }
    }
    let netconsole = netconsole(config, member, link, client);
    if let Some(template) = &pool.cmdline_template {
        return from_template(config, member, image, link, template, &root, &netconsole);
    }
    let mut line = format!("{root} bootpool.url={}", http_base(config, link));
    let hostname = hostname(member);
    if !hostname.is_empty() {
        line.push(' ');
        line.push_str(&hostname);
    }
    let own = member.cmdline();
    if !own.is_empty() {
        line.push(' ');
        line.push_str(&own);
    }
    if !netconsole.is_empty() {
        line.push(' ');
        line.push_str(&netconsole);
    }
    // The EFI stub finds each initrd iPXE hands over by this name (its URL's last part).
    line.push_str(&efi_initrds(member, image));
    line
}

/// `bootpool.blocks=`'s value: the root's block manifest on the boot's own link, then on each
/// of the site's other members holding it (`Image::blocks_elsewhere`, in the order given), as
/// one comma list: the agent reads from the first that answers and falls over to the next.
fn blocks_sources(config: &Config, image: &Image, link: Ipv4Addr) -> String {
    let path = format!(
        "/boot/{}/blocks/{}",
        image.name,
        image.blocks.as_deref().unwrap_or_default()
    );
    std::iter::once(http_base(config, link))
        .chain(image.blocks_elsewhere.iter().cloned())
        .map(|base| format!("{base}{path}"))
        .collect::<Vec<_>>()
        .join(",")
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

/// `systemd.hostname=NAME` for a client with a name, else empty: systemd sets it over the
/// image's /etc/hostname (an initrd's `ip=dhcp` already takes DHCP's option 12 for itself).
pub fn hostname(member: &Member) -> String {
    member
        .name()
        .map(|n| format!("systemd.hostname={n}"))
        .unwrap_or_default()
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
        Field::Cmdline => member.cmdline(),
        Field::Netconsole => netconsole.to_string(),
        Field::Name => member.name().unwrap_or_default(),
        Field::Hostname => hostname(member),
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
    format!(
        "#!ipxe\n{}{}",
        hello(member, mac),
        image_lines(config, member, image, link, client, files)
    )
}

/// The script's first line: who it is for.
fn hello(member: &Member, mac: Mac) -> String {
    let name = member.name().unwrap_or_default();
    format!(
        "echo bootpool: pool {pool} client {mac} {name}\n",
        pool = member.pool.name
    )
}

/// The lines that boot `image`: its kernel with the command line, its initrd.
fn image_lines(
    config: &Config,
    member: &Member,
    image: &Image,
    link: Ipv4Addr,
    client: Option<Ipv4Addr>,
    files: IpAddr,
) -> String {
    let base = http_base_at(config, files);
    // The addition after the image's own initrd: the kernel unpacks both into one rootfs, the
    // later over the earlier.
    let addition = if addition::handed(member.pool) {
        format!("initrd {base}/boot/loaders/{}\n", addition::NAME)
    } else {
        String::new()
    };
    format!(
        "kernel {base}/boot/{image}/{kernel} {cmdline}\n\
         initrd {base}/boot/{image}/{initrd}\n\
         {addition}\
         boot\n",
        image = image.name,
        kernel = image.kernel_name,
        initrd = image.initrd_name,
        cmdline = cmdline(config, member, image, link, client),
    )
}

/// What a client's script needs of the next boot an admin set for it (`boot::next`).
pub struct Next<'a> {
    pub entry: &'a next::Entry,
    /// Its firmware (option 93 as its lease keeps it): what `local` and `memtest` run.
    pub firmware: Firmware,
    /// Whether `server.memtest` holds memtest86+'s files: the menu lists it only then.
    pub memtest: bool,
}

/// How long the menu waits before it boots the pool's image.
pub const MENU_TIMEOUT_MS: u32 = 10_000;

/// The iPXE script of a client whose next boot an admin set. `image` is the image the caller
/// resolved for it (an `image:` or `revision:` entry's, else the pool's); `local`, `memtest`
/// and `menu` are written here. Every such script says so in its second line.
#[allow(clippy::too_many_arguments)]
pub fn next_script(
    config: &Config,
    member: &Member,
    image: &Image,
    mac: Mac,
    link: Ipv4Addr,
    client: Option<Ipv4Addr>,
    files: IpAddr,
    next: &Next,
) -> String {
    let mut s = format!(
        "#!ipxe\n{}echo bootpool: next boot {}\n",
        hello(member, mac),
        next.entry.sentence()
    );
    let image_lines = || image_lines(config, member, image, link, client, files);
    match next.entry.target {
        Target::Local => s.push_str(&local_lines(next.firmware)),
        Target::Memtest => s.push_str(&memtest_lines(config, member, files, next.firmware)),
        Target::Menu => {
            s.push_str(&format!(
                "menu bootpool: pool {pool}, client {mac}\n\
                 item image Boot {image} (the pool's image)\n\
                 item local Boot from the local disk\n",
                pool = member.pool.name,
                image = image.name,
            ));
            if next.memtest {
                s.push_str("item memtest Test the memory (memtest86+)\n");
            }
            s.push_str(&format!(
                "choose --default image --timeout {MENU_TIMEOUT_MS} target || goto image\n\
                 goto ${{target}}\n\
                 :image\n{}\
                 :local\n{}",
                image_lines(),
                local_lines(next.firmware)
            ));
            if next.memtest {
                s.push_str(":memtest\n");
                s.push_str(&memtest_lines(config, member, files, next.firmware));
            }
        }
        Target::Image(_) | Target::Revision(..) | Target::Default => s.push_str(&image_lines()),
    }
    s
}

/// The firmware's next boot device: the first disk's boot sector on BIOS (`sanboot`, no
/// iBFT/aBFT table described to it), back to the firmware's boot order on UEFI (`exit`).
fn local_lines(firmware: Firmware) -> String {
    const BIOS: &str = "sanboot --no-describe --drive 0x80\n";
    match firmware {
        Firmware::Bios => BIOS.to_string(),
        Firmware::Uefi => "exit\n".to_string(),
        Firmware::Unknown => format!("iseq ${{platform}} efi && exit ||\n{BIOS}"),
    }
}

/// memtest86+ from `server.memtest` (over HTTP, as a loader's name), with the pool's
/// `console=` arguments so a serial console shows it too.
fn memtest_lines(config: &Config, member: &Member, files: IpAddr, firmware: Firmware) -> String {
    let base = http_base_at(config, files);
    let cmdline = member.cmdline();
    let console: Vec<&str> = cmdline
        .split_whitespace()
        .filter(|a| a.starts_with("console="))
        .collect();
    let args = match console.is_empty() {
        true => String::new(),
        false => format!(" {}", console.join(" ")),
    };
    let kernel = |file: &str| format!("kernel {base}/boot/loaders/{file}{args}");
    let load = match firmware {
        Firmware::Bios => kernel(next::MEMTEST_BIOS),
        Firmware::Uefi => kernel(next::MEMTEST_UEFI),
        Firmware::Unknown => format!(
            "iseq ${{platform}} efi && {} || {}",
            kernel(next::MEMTEST_UEFI),
            kernel(next::MEMTEST_BIOS)
        ),
    };
    format!("{load}\nboot\n")
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

    /// A named client's name goes on its command line as `systemd.hostname=`, and to the
    /// template's `{name}` and `{hostname}`; an unnamed one gets neither.
    #[test]
    fn a_named_client_gets_its_hostname() {
        let named = super::super::tests::CONFIG.replace("\" }\n", "\", name: \"pc{n:03}\" }\n");
        let c = Config::parse(Path::new("p.yaml"), &named).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        let link = c.server.address;
        assert_eq!(
            cmdline(&c, &m, m.image(), link, None),
            "root=nbd:10.77.0.1:demo bootpool.url=http://10.77.0.1:8080 \
             systemd.hostname=pc003 console=ttyS0 initrd=initrd.img"
        );
        let t = named.replace(
            "    cmdline: console=ttyS0\n",
            "    cmdline: console=ttyS0\n    cmdline_template: \"{root} {hostname} x={name} {cmdline}\"\n",
        );
        let c = Config::parse(Path::new("p.yaml"), &t).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert_eq!(
            cmdline(&c, &m, m.image(), link, None),
            "root=nbd:10.77.0.1:demo systemd.hostname=pc003 x=pc003 console=ttyS0"
        );
        let c = Config::parse(Path::new("p.yaml"), super::super::tests::CONFIG).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        assert!(!cmdline(&c, &m, m.image(), link, None).contains("hostname"));
    }

    /// An entry's own image and cmdline make its script: another kernel, initrd and root,
    /// and its arguments after the pool's, while the rest of the pool keeps the pool's.
    #[test]
    fn an_entrys_overrides_make_its_script() {
        let text = super::super::tests::CONFIG
            .replace(
                "  demo: { dir: images/demo }\n",
                "  demo: { dir: images/demo }\n  desk: { dir: images/desk }\n",
            )
            .replace(
                "      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:ff\" }\n",
                "      - { macs: \"52:54:00:77:00:00-52:54:00:77:00:fe\" }\n      \
                 - { mac: \"52:54:00:77:00:ff\", image: desk, cmdline: quiet }\n",
            );
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let link = c.server.address;
        let script = |mac: &str| {
            let mac: Mac = mac.parse().unwrap();
            let m = c.member(mac).unwrap();
            ipxe_script(&c, &m, m.image(), mac, link, None, link.into())
        };
        let own = script("52:54:00:77:00:ff");
        assert!(own.contains("kernel http://10.77.0.1:8080/boot/desk/vmlinuz root=nbd:10.77.0.1:desk bootpool.url=http://10.77.0.1:8080 console=ttyS0 quiet initrd=initrd.img\n"), "{own}");
        assert!(
            own.contains("initrd http://10.77.0.1:8080/boot/desk/initrd.img\n"),
            "{own}"
        );
        let pools = script("52:54:00:77:00:fe");
        assert!(
            pools.contains("/boot/demo/vmlinuz root=nbd:10.77.0.1:demo "),
            "{pools}"
        );
        assert!(!pools.contains("quiet"), "{pools}");
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
                " root=nbd:10.77.0.1:demo ip=dhcp bootpool.overlay=tmpfs bootpool.url=http://10.77.0.1:8080 console=ttyS0 initrd=initrd.img initrd=bootpool-overlay.cpio\n\
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
        assert!(
            script_of(&sized)
                .contains(" root=nbd:10.77.0.1:demo ip=dhcp bootpool.overlay=tmpfs:2g ")
        );
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

    /// `homes` go on the command line after the overlay's argument, for the addition to
    /// write into the root's /etc/fstab.
    #[test]
    fn homes_go_to_the_addition_on_the_command_line() {
        let text = super::super::tests::CONFIG.replace(
            "root: nbd",
            "root: nbd\n    initramfs: dracut\n    homes: { server: 10.77.0.5, export: /home }",
        );
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        let line = cmdline(&c, &m, m.image(), c.server.address, None);
        assert!(
            line.starts_with(
                "root=nbd:10.77.0.1:demo ip=dhcp bootpool.overlay=tmpfs bootpool.homes=10.77.0.5:/home \
                 bootpool.homes.options=rw,hard,nofail,_netdev bootpool.url="
            ),
            "{line}"
        );
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

    /// `nbd: { via: agent }`: the kernel's NBD client attaches to the agent on 127.0.0.1 and
    /// the agent is told the manifest's URL on this boot's server, when the image resolved
    /// for the boot has its manifest's digest; without one, the server's NBD export as before.
    #[test]
    fn an_nbd_root_through_the_agent_names_the_manifest_on_the_boots_server() {
        let agent = tempfile::NamedTempFile::new().unwrap();
        let text = super::super::tests::CONFIG
            .replace(
                "root: nbd",
                "root: nbd\n    initramfs: initramfs-tools\n    nbd: { via: agent }",
            )
            .replace(
                "http: 0.0.0.0:8080",
                &format!("http: 0.0.0.0:8080, agent: {}", agent.path().display()),
            );
        let c = Config::parse(Path::new("p.yaml"), &text).unwrap();
        let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        let mut image = (**m.image()).clone();
        let line = |image: &Image| cmdline(&c, &m, image, c.server.address, None);
        assert!(
            line(&image).starts_with("boot=bootpool root=/dev/nbd0 nbdroot=10.77.0.1:10809/demo "),
            "{}",
            line(&image)
        );
        image.blocks = Some("ab".repeat(32));
        let want = format!(
            "boot=bootpool root=/dev/nbd0 nbdroot=127.0.0.1:10809/root ip=dhcp \
             bootpool.blocks=http://10.77.0.1:8080/boot/demo/blocks/{} bootpool.overlay=tmpfs ",
            "ab".repeat(32)
        );
        assert!(line(&image).starts_with(&want), "{}", line(&image));
        // In a site, the other members holding the root follow the boot's own link.
        image.blocks_elsewhere = vec![
            "http://10.77.0.2:8080".into(),
            "http://10.77.0.3:8081".into(),
        ];
        let want = format!(
            "bootpool.blocks=http://10.77.0.1:8080/boot/demo/blocks/{d},\
             http://10.77.0.2:8080/boot/demo/blocks/{d},\
             http://10.77.0.3:8081/boot/demo/blocks/{d} bootpool.overlay=tmpfs ",
            d = "ab".repeat(32)
        );
        assert!(line(&image).contains(&want), "{}", line(&image));
        // dracut's nbdroot: the agent on NBD's default port, export `root`.
        let dracut = Config::parse(
            Path::new("p.yaml"),
            &text.replace("initramfs-tools", "dracut"),
        )
        .unwrap();
        let d = dracut.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
        let d_line = cmdline(&dracut, &d, &image, dracut.server.address, None);
        assert!(
            d_line.starts_with(&format!(
                "root=nbd:127.0.0.1:root bootpool.blocks=http://10.77.0.1:8080/boot/demo/blocks/{}",
                "ab".repeat(32)
            )) && d_line.contains(" ip=dhcp "),
            "{d_line}"
        );
        // A boot given another link names that one first.
        let other = cmdline(&c, &m, &image, Ipv4Addr::new(10, 77, 0, 9), None);
        assert!(
            other.contains("bootpool.blocks=http://10.77.0.9:8080/boot/demo/blocks/"),
            "{other}"
        );
    }

    /// `nbd: { via: agent, peers: true }`: the agent is told to serve its room's peers on
    /// `bootpool.peers=PORT`; without `peers`, or without the manifest (the server's own NBD
    /// export), nothing is added: the boot is the agent's unicast one.
    #[test]
    fn peers_are_named_on_the_line_only_for_a_pool_that_shares() {
        let agent = tempfile::NamedTempFile::new().unwrap();
        let config = |nbd: &str| {
            let text = super::super::tests::CONFIG
                .replace(
                    "root: nbd",
                    &format!("root: nbd\n    initramfs: initramfs-tools\n    nbd: {nbd}"),
                )
                .replace(
                    "http: 0.0.0.0:8080",
                    &format!("http: 0.0.0.0:8080, agent: {}", agent.path().display()),
                );
            Config::parse(Path::new("p.yaml"), &text).unwrap()
        };
        let line = |c: &Config, blocks: bool| {
            let m = c.member("52:54:00:77:00:02".parse().unwrap()).unwrap();
            let mut image = (**m.image()).clone();
            image.blocks = blocks.then(|| "ab".repeat(32));
            cmdline(c, &m, &image, c.server.address, None)
        };
        let on = config("{ via: agent, peers: true }");
        assert!(
            line(&on, true).contains(" bootpool.peers=10810 "),
            "{}",
            line(&on, true)
        );
        assert!(!line(&on, false).contains("bootpool.peers"));
        let off = config("{ via: agent }");
        assert!(!line(&off, true).contains("bootpool.peers"));
    }

    /// Each next-boot target's script: local disk (sanboot on BIOS, exit on UEFI, iPXE asked
    /// when the firmware never said), memtest86+ with the pool's console, the menu, and an
    /// image's usual lines; each says what was set.
    #[test]
    fn each_next_boot_target_has_its_script() {
        let c = Config::parse(Path::new("p.yaml"), super::super::tests::CONFIG).unwrap();
        let mac: Mac = "52:54:00:77:00:02".parse().unwrap();
        let m = c.member(mac).unwrap();
        let script = |target: &str, firmware, memtest| {
            let entry = next::Entry {
                scope: next::Scope::Client(mac),
                target: target.parse().unwrap(),
                once: true,
                set_at: 1_800_000_000,
                by: "admin".into(),
                used: Vec::new(),
            };
            let n = Next {
                entry: &entry,
                firmware,
                memtest,
            };
            let a = c.server.address;
            next_script(&c, &m, m.image(), mac, a, None, a.into(), &n)
        };
        let said = "echo bootpool: next boot local, once, set by admin at 1800000000 (client 52:54:00:77:00:02)\n";
        let bios = script("local", Firmware::Bios, true);
        assert!(
            bios.starts_with("#!ipxe\necho bootpool: pool room client"),
            "{bios}"
        );
        assert!(bios.contains(said), "{bios}");
        assert!(
            bios.ends_with("\nsanboot --no-describe --drive 0x80\n"),
            "{bios}"
        );
        assert!(!bios.contains("kernel"), "{bios}");
        assert!(script("local", Firmware::Uefi, true).ends_with("\nexit\n"));
        assert!(
            script("local", Firmware::Unknown, true).ends_with(
                "\niseq ${platform} efi && exit ||\nsanboot --no-describe --drive 0x80\n"
            )
        );
        let memtest = script("memtest", Firmware::Bios, true);
        assert!(
            memtest.ends_with(
                "\nkernel http://10.77.0.1:8080/boot/loaders/memtest86+x64.bin console=ttyS0\nboot\n"
            ),
            "{memtest}"
        );
        assert!(script("memtest", Firmware::Uefi, true).contains(
            "kernel http://10.77.0.1:8080/boot/loaders/memtest86+x64.efi console=ttyS0\n"
        ));
        assert!(script("memtest", Firmware::Unknown, true).contains(
            "iseq ${platform} efi && kernel http://10.77.0.1:8080/boot/loaders/memtest86+x64.efi console=ttyS0 || kernel http://10.77.0.1:8080/boot/loaders/memtest86+x64.bin console=ttyS0\n"
        ));
        let menu = script("menu", Firmware::Bios, true);
        for line in [
            "menu bootpool: pool room, client 52:54:00:77:00:02\n",
            "item image Boot demo (the pool's image)\n",
            "item local Boot from the local disk\n",
            "item memtest Test the memory (memtest86+)\n",
            "choose --default image --timeout 10000 target || goto image\ngoto ${target}\n",
            ":image\nkernel http://10.77.0.1:8080/boot/demo/vmlinuz root=nbd:",
            ":local\nsanboot --no-describe --drive 0x80\n",
            ":memtest\nkernel http://10.77.0.1:8080/boot/loaders/memtest86+x64.bin",
        ] {
            assert!(menu.contains(line), "{line:?} not in\n{menu}");
        }
        // Without memtest86+'s files the menu has no entry for it.
        let plain = script("menu", Firmware::Bios, false);
        assert!(!plain.contains("memtest"), "{plain}");
        // An image (resolved by the caller) or the pool's again: the usual lines, said.
        let usual = ipxe_script(
            &c,
            &m,
            m.image(),
            mac,
            c.server.address,
            None,
            c.server.address.into(),
        );
        let default = script("default", Firmware::Bios, true);
        assert!(
            default.contains("echo bootpool: next boot default, once"),
            "{default}"
        );
        assert!(
            default.ends_with(
                usual
                    .split_once("\n")
                    .unwrap()
                    .1
                    .split_once("\n")
                    .unwrap()
                    .1
            )
        );
    }
}
