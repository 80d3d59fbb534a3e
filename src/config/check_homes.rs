//! `pools.NAME.homes`, checked: the site's NFS export of the users' homes (`server`, `export`,
//! `options`) that bootpool's addition has each client mount at /home, written into the
//! root's /etc/fstab in the overlay's writable layer (docs/homes.md). Each value must go on
//! the kernel command line and into an fstab line as one word.

use super::check::Checker;
use super::error::ConfigError;
use super::locate::Step::Key;
use super::model::{Homes, Initramfs, Overlay};
use super::raw;
use std::net::{Ipv4Addr, Ipv6Addr};

/// What the addition mounts with when `options` is not given: read-write, retried while the
/// server is away rather than failing the program (`hard`), and a boot that goes on without
/// the homes (`nofail`) once the network is up (`_netdev`).
pub const DEFAULT_OPTIONS: &str = "rw,hard,nofail,_netdev";

impl Checker<'_> {
    /// The pool's `homes`, if any: only where the addition is handed with a writable layer,
    /// which takes the fstab line.
    pub(super) fn check_homes(
        &self,
        pool: &str,
        raw: Option<&raw::Homes>,
        initramfs: Initramfs,
        overlay: &Overlay,
    ) -> Result<Option<Homes>, ConfigError> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        let under = |key| [Key("pools"), Key(pool), Key("homes"), Key(key)];
        let at = [Key("pools"), Key(pool), Key("homes")];
        if initramfs == Initramfs::Bootpool {
            return Err(self.err(
                &at,
                "are mounted by bootpool's addition to stock initrds: set `initramfs` to the \
                 image's initrd builder (initramfs-tools or dracut); the demo's own initrd \
                 mounts none",
            ));
        }
        if *overlay == Overlay::Off {
            return Err(self.err(
                &at,
                "need the overlay: the addition writes the mount into the root's /etc/fstab \
                 in its writable layer; remove `overlay: off` (or give tmpfs or a disk)",
            ));
        }
        let server = server(&raw.server).map_err(|why| self.err(&under("server"), why))?;
        export(&raw.export).map_err(|why| self.err(&under("export"), why))?;
        let options = match &raw.options {
            None => DEFAULT_OPTIONS.to_string(),
            Some(o) => {
                options(o).map_err(|why| self.err(&under("options"), why))?;
                o.clone()
            }
        };
        Ok(Some(Homes {
            server,
            export: raw.export.clone(),
            options,
        }))
    }
}

/// The server as mount.nfs takes it: an IPv4 address or host name as given, an IPv6 address
/// in brackets (given with or without them).
fn server(given: &str) -> Result<String, String> {
    let bare = given
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(given);
    if let Ok(v6) = bare.parse::<Ipv6Addr>() {
        return Ok(format!("[{v6}]"));
    }
    if given.parse::<Ipv4Addr>().is_ok() || host_name(given) {
        return Ok(given.to_string());
    }
    Err(format!(
        "`{given}` is not a server: give the home server's address (10.0.0.5, fd00::5) or \
         host name (files.example.org)"
    ))
}

/// A DNS host name: dot-separated labels of letters, digits and inner `-`, not all digits.
fn host_name(name: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    name.len() <= 253
        && name.split('.').all(label)
        && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// An absolute path with nothing a command line, an fstab field or a shell word would split.
fn export(path: &str) -> Result<(), String> {
    let ok = path.starts_with('/')
        && !path.split('/').any(|c| c == "..")
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{path}` is not an export: give the folder the server exports, an absolute path \
             (e.g. /home or /srv/homes) of letters, digits and / . _ - + only"
        ))
    }
}

/// Mount options: comma-separated words, each of letters, digits and `_ . = - + : /`.
fn options(list: &str) -> Result<(), String> {
    let word = |w: &str| {
        !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.=-+:/".contains(&b))
    };
    if list.split(',').all(word) {
        Ok(())
    } else {
        Err(format!(
            "`{list}` is not a list of mount options: give them as fstab does, separated by \
             commas without spaces (e.g. {DEFAULT_OPTIONS},vers=4.2)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, ConfigError};
    use std::path::Path;

    const POOLS: &str = "\
server: { address: 10.77.0.1, http: 0.0.0.0:8080 }
dhcp: { subnet: 10.77.0.0/24, range: 10.77.0.100-10.77.0.199 }
images:
  demo: { dir: images/demo }
pools:
  room:
    image: demo
    root: nfs
    initramfs: initramfs-tools
";

    fn parse(homes: &str) -> Result<Config, ConfigError> {
        Config::parse(
            Path::new("/etc/bootpool/pools.yaml"),
            &format!("{POOLS}{homes}"),
        )
    }

    #[test]
    fn homes_take_the_default_options_and_keep_given_ones() {
        let c = parse("    homes: { server: 10.77.0.5, export: /home }\n").unwrap();
        let want = Homes {
            server: "10.77.0.5".into(),
            export: "/home".into(),
            options: DEFAULT_OPTIONS.into(),
        };
        assert_eq!(c.pools["room"].homes, Some(want));
        let c = parse(
            "    homes:\n      server: \"fd00::5\"\n      export: /srv/homes\n      options: rw,vers=4.2\n",
        )
        .unwrap();
        let h = c.pools["room"].homes.clone().unwrap();
        assert_eq!(
            (h.server.as_str(), h.options.as_str()),
            ("[fd00::5]", "rw,vers=4.2")
        );
        assert_eq!(parse("").unwrap().pools["room"].homes, None);
    }

    #[test]
    fn bad_homes_are_refused_at_their_key_and_line() {
        let e = parse("    homes: { server: 10.77.0.5, export: home }\n").unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.line),
            ("pools.room.homes.export", Some(10)),
            "{e}"
        );
        let e = parse("    homes: { server: \"a b\", export: /home }\n").unwrap_err();
        assert_eq!(e.path, "pools.room.homes.server", "{e}");
        let e = parse(
            "    homes:\n      server: h\n      export: /home\n      options: \"rw, hard\"\n",
        )
        .unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.line),
            ("pools.room.homes.options", Some(13)),
            "{e}"
        );
        let e = parse("    homes: { server: h, export: /home, at: /srv }\n").unwrap_err();
        assert!(e.to_string().contains("at"), "{e}");
    }

    #[test]
    fn homes_need_a_stock_initrd_and_its_overlay() {
        let e = parse("    overlay: off\n    homes: { server: h, export: /home }\n").unwrap_err();
        assert_eq!(e.path, "pools.room.homes", "{e}");
        assert!(e.reason.contains("overlay"), "{e}");
        let demo = format!("{POOLS}    homes: {{ server: h, export: /home }}\n")
            .replace("    initramfs: initramfs-tools\n", "");
        let e = Config::parse(Path::new("p.yaml"), &demo).unwrap_err();
        assert_eq!(e.path, "pools.room.homes", "{e}");
        assert!(e.reason.contains("initramfs"), "{e}");
    }

    #[test]
    fn a_server_is_an_address_or_a_host_name_and_ipv6_goes_in_brackets() {
        assert_eq!(server("10.0.0.5").unwrap(), "10.0.0.5");
        assert_eq!(server("fd00::5").unwrap(), "[fd00::5]");
        assert_eq!(server("[fd00::5]").unwrap(), "[fd00::5]");
        assert_eq!(server("files.example.org").unwrap(), "files.example.org");
        assert_eq!(server("homes").unwrap(), "homes");
        for bad in [
            "",
            "10.0.0.300",
            "a b",
            "files.example.org:/home",
            "-x",
            "x..y",
        ] {
            assert!(server(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_export_is_one_absolute_word() {
        assert!(export("/home").is_ok());
        assert!(export("/srv/homes-2").is_ok());
        for bad in [
            "home",
            "/home dir",
            "/srv/../etc",
            "/home,rw",
            "/home:x",
            "",
        ] {
            assert!(export(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options_are_fstab_words_without_spaces() {
        assert!(options(DEFAULT_OPTIONS).is_ok());
        assert!(options("vers=4.2,sec=krb5p,x-systemd.automount").is_ok());
        for bad in [
            "",
            "rw,,hard",
            "rw, hard",
            "rw hard",
            "rw;reboot",
            "rw,$(x)",
        ] {
            assert!(options(bad).is_err(), "{bad}");
        }
    }
}
