//! End to end with the stock initrd builders: the demo kernel and root with an initrd made by
//! Debian's initramfs-tools (mkinitramfs) and one made by dracut, as images/build-demo.sh
//! builds them into `images/demo/stock/`. `bootpool lab` boots one VM per builder and root
//! (NFS, NBD) with the kernel command line bootpool generates for the pool's `initramfs:`,
//! and the builders' own scripts (klibc nfsmount, Debian's nbd script, dracut's nfsroot and
//! nbdroot) must find the root from it. The pools say `overlay: off`: this is the builders' own
//! root mounting (the overlay addition over a stock image is `e2e_stock_image.rs`'s). Needs root
//! and what scripts/setup installs and builds.

use crate::common::lab::{client_consoles, lab_config, repo, run_lab};

/// Each builder, with a line its initrd prints on the console before it mounts the root.
const BUILDERS: [(&str, &str); 2] = [
    ("initramfs-tools", "Begin: Mounting root file system"),
    ("dracut", "dracut: Starting dhcp for interface"),
];

/// The shipped config plus an image per builder (`images/demo/stock/BUILDER`) and a pool per
/// builder and root, `BUILDER-nfs` and `BUILDER-nbd`, with MACs of their own.
fn with_stock_pools(text: String) -> String {
    let mut images = String::from("images:\n");
    let mut pools = String::new();
    for (b, (builder, _)) in BUILDERS.iter().enumerate() {
        let dir = repo().join("images/demo/stock").join(builder);
        images.push_str(&format!("  {builder}:\n    dir: {}\n", dir.display()));
        for (r, root) in ["nfs", "nbd"].iter().enumerate() {
            pools.push_str(&format!(
                "  {builder}-{root}:
    image: {builder}
    root: {root}
    initramfs: {builder}
    overlay: off
    cmdline: console=ttyS0
    clients:
      - {{ macs: \"52:54:00:77:2{b}:{r}1-52:54:00:77:2{b}:{r}f\" }}
"
            ));
        }
    }
    text.replace("images:\n", &images) + &pools
}

#[test]
fn initrds_of_the_stock_builders_boot_nfs_and_nbd_roots_from_generated_command_lines() {
    let stock = repo().join("images/demo/stock");
    for (builder, _) in BUILDERS {
        assert!(
            stock.join(builder).join("initrd.img").exists(),
            "no {builder} initrd: run images/build-demo.sh (scripts/setup)"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let config = lab_config(dir.path(), with_stock_pools);
    let pools: Vec<String> = BUILDERS
        .iter()
        .flat_map(|(b, _)| [format!("{b}-nfs"), format!("{b}-nbd")])
        .collect();
    let mut args = vec!["--clients", "1", "--timeout", "420"];
    for p in &pools {
        args.extend(["--pool", p.as_str()]);
    }
    let (table, rows) = run_lab(&config, &args, 500);
    assert_eq!(rows.len(), pools.len(), "{table}");
    for cells in &rows {
        assert_eq!(cells[3], "booted", "{table}");
    }
    let booted: Vec<&str> = rows.iter().map(|r| r.last().unwrap().as_str()).collect();
    for p in &pools {
        assert!(booted.contains(&p.as_str()), "{p} missing:\n{table}");
    }

    // The builders' own scripts mounted the roots: each console shows its builder's line,
    // and the command line it was given is the one bootpool generates for that builder.
    let consoles = client_consoles(&dir.path().join("var"));
    // What bootpool generates for each (pools.yaml(5), `initramfs`), with the shipped ports.
    let generated = [
        (
            "initramfs-tools",
            "boot=nfs root=/dev/nfs nfsroot=10.77.0.1:/initramfs-tools,ro,nocto,port=2049 ip=dhcp ",
        ),
        (
            "initramfs-tools",
            "boot=local root=/dev/nbd0 nbdroot=10.77.0.1:10809/initramfs-tools ip=dhcp ",
        ),
        (
            "dracut",
            "root=nfs:10.77.0.1:/dracut:ro,nocto,port=2049,mountport=2049 ip=dhcp ",
        ),
        ("dracut", "root=nbd:10.77.0.1:dracut ip=dhcp "),
    ];
    for (builder, cmdline) in generated {
        let says = BUILDERS.iter().find(|b| b.0 == builder).unwrap().1;
        let shown = consoles
            .iter()
            .filter(|c| {
                c.contains(says)
                    && c.lines()
                        .any(|l| l.contains("Kernel command line: ") && l.contains(cmdline))
            })
            .count();
        assert_eq!(
            shown, 1,
            "no console shows `{cmdline}` then `{says}`:\n{table}"
        );
    }
    // The daemon journalled every root attach, both protocols.
    let journal = crate::common::recorded_events(&dir.path().join("var"));
    assert!(
        journal.matches("\"root_attach\"").count() >= pools.len(),
        "{journal}"
    );
    for proto in ["nfs", "nbd"] {
        assert!(
            journal.contains(&format!("\"proto\":\"{proto}\"")),
            "{journal}"
        );
    }
}
