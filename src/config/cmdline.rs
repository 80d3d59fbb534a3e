//! `pools.NAME.cmdline_template`: a whole kernel command line with placeholders, for initrds
//! that read another syntax than the root arguments bootpool writes. Checked when the config
//! is read (an unknown placeholder or a stray brace is an error naming its key); filled in per
//! client by `boot::script`.

/// What a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The address of the client's server link.
    Server,
    /// `http://SERVER:PORT`: the HTTP base, where `bootpool.url=` points.
    Http,
    HttpPort,
    /// The root argument bootpool would write for the pool's `initramfs`.
    Root,
    /// The pool's root export: the NFS export path or the NBD export name.
    Export,
    /// The port of the pool's root service: NFS (and MOUNT) or NBD.
    Port,
    NfsExport,
    NfsPort,
    NbdExport,
    NbdPort,
    PortmapPort,
    Image,
    Pool,
    /// The initrd's file name, as iPXE hands it to the kernel (`initrd=`).
    Initrd,
    /// The pool's own `cmdline`.
    Cmdline,
    /// `netconsole=...` when the pool has `netconsole` on, else nothing.
    Netconsole,
    /// The client's `name`, else nothing.
    Name,
    /// `systemd.hostname=NAME` for a client with a `name`, else nothing.
    Hostname,
}

/// Every placeholder, by the name written between braces.
pub const FIELDS: [(&str, Field); 18] = [
    ("server", Field::Server),
    ("http", Field::Http),
    ("http_port", Field::HttpPort),
    ("root", Field::Root),
    ("export", Field::Export),
    ("port", Field::Port),
    ("nfs_export", Field::NfsExport),
    ("nfs_port", Field::NfsPort),
    ("nbd_export", Field::NbdExport),
    ("nbd_port", Field::NbdPort),
    ("portmap_port", Field::PortmapPort),
    ("image", Field::Image),
    ("pool", Field::Pool),
    ("initrd", Field::Initrd),
    ("cmdline", Field::Cmdline),
    ("netconsole", Field::Netconsole),
    ("name", Field::Name),
    ("hostname", Field::Hostname),
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(Field),
}

/// A checked template: text and placeholders in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

impl Template {
    /// Reads `{name}` placeholders and `{{`/`}}` for literal braces; `Err` says what is wrong.
    pub fn parse(text: &str) -> Result<Template, String> {
        if text.trim().is_empty() {
            return Err("is empty: give the whole kernel command line".into());
        }
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(i) = rest.find(['{', '}']) {
            literal.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(after) = tail.strip_prefix("{{") {
                literal.push('{');
                rest = after;
            } else if let Some(after) = tail.strip_prefix("}}") {
                literal.push('}');
                rest = after;
            } else if tail.starts_with('}') {
                return Err("has a `}` that closes no placeholder (write `}}` for a brace)".into());
            } else {
                let end = tail
                    .find('}')
                    .ok_or("has a `{` that is never closed (write `{{` for a brace)")?;
                let name = &tail[1..end];
                let field = FIELDS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, f)| *f)
                    .ok_or_else(|| {
                        let known: Vec<String> =
                            FIELDS.iter().map(|(n, _)| format!("{{{n}}}")).collect();
                        format!(
                            "has an unknown placeholder `{{{name}}}` (placeholders: {})",
                            known.join(", ")
                        )
                    })?;
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Field(field));
                rest = &tail[end + 1..];
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template(pieces))
    }

    /// Whether the template says `{field}` somewhere.
    pub fn uses(&self, field: Field) -> bool {
        self.0.contains(&Piece::Field(field))
    }

    /// The line with each placeholder replaced by `value(field)`.
    pub fn render(&self, value: impl Fn(Field) -> String) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Field(f) => out.push_str(&value(*f)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_braces_doubled_are_kept() {
        let t = Template::parse("nfsroot={server}:{export} x={{y}} {cmdline}").unwrap();
        assert!(t.uses(Field::Cmdline) && !t.uses(Field::Root));
        let line = t.render(|f| match f {
            Field::Server => "10.77.0.1".into(),
            Field::Export => "/demo".into(),
            Field::Cmdline => "quiet".into(),
            _ => "?".into(),
        });
        assert_eq!(line, "nfsroot=10.77.0.1:/demo x={y} quiet");
    }

    #[test]
    fn unknown_placeholders_and_stray_braces_are_refused() {
        let e = Template::parse("root={rot}").unwrap_err();
        assert!(
            e.contains("unknown placeholder `{rot}`") && e.contains("{root}"),
            "{e}"
        );
        assert!(
            Template::parse("a {server")
                .unwrap_err()
                .contains("never closed")
        );
        assert!(
            Template::parse("a } b")
                .unwrap_err()
                .contains("closes no placeholder")
        );
        assert!(Template::parse("  ").unwrap_err().contains("empty"));
        assert!(
            Template::parse("{}")
                .unwrap_err()
                .contains("unknown placeholder `{}`")
        );
    }
}
