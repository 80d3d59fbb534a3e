//! Finds where a YAML path (`pools.room-101.clients[2].mac`) stands in the file text, so that
//! errors found after parsing still name a line and column. It reads block-style YAML the way
//! pools.yaml is written (indented keys, `- ` list items, flow maps on one line); when it cannot
//! follow the path it returns the deepest position it reached.

/// One step of a YAML path.
#[derive(Debug, Clone)]
pub enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// What one line holds, as far as paths go: an optional list dash and an optional key.
struct Line<'t> {
    text: &'t str,
    /// Column (0-based) of the first non-blank character.
    indent: usize,
    /// Column of a leading `- `, if the line starts a list item.
    dash: Option<usize>,
    /// The block key on this line and its column.
    key: Option<(&'t str, usize)>,
}

fn parse_line(text: &str) -> Option<Line<'_>> {
    let content = strip_comment(text);
    let body = content.trim_start();
    if body.is_empty() {
        return None;
    }
    let indent = content.len() - body.len();
    let (dash, rest, rest_col) = match body.strip_prefix('-') {
        Some(r) if r.is_empty() || r.starts_with(' ') => {
            let r2 = r.trim_start();
            (Some(indent), r2, indent + 1 + (r.len() - r2.len()))
        }
        _ => (None, body, indent),
    };
    let key = key_of(rest).map(|k| (k, rest_col));
    Some(Line {
        text,
        indent,
        dash,
        key,
    })
}

/// 1-based (line, column) of the last step of `path` found in `text`; when a step is missing,
/// the position of the deepest step that was found.
pub fn locate(text: &str, path: &[Step]) -> Option<(usize, usize)> {
    let lines: Vec<Option<Line>> = text.lines().map(parse_line).collect();
    let (mut from, mut to) = (0usize, lines.len());
    let mut found: Option<(usize, usize)> = None;
    for step in path {
        let block: Vec<(usize, &Line)> = (from..to)
            .filter_map(|n| lines[n].as_ref().map(|l| (n, l)))
            .collect();
        let hit = match step {
            Step::Key(k) => {
                let col = block.iter().find_map(|(_, l)| l.key.map(|(_, c)| c));
                block.iter().find_map(|(n, l)| match l.key {
                    Some((key, c)) if Some(c) == col && key == *k => Some((*n, c)),
                    _ => None,
                })
            }
            Step::Index(i) => {
                let col = block.iter().find_map(|(_, l)| l.dash);
                block
                    .iter()
                    .filter(|(_, l)| l.dash.is_some() && l.dash == col)
                    .nth(*i)
                    .map(|(n, l)| (*n, l.indent))
            }
        };
        let Some((n, col)) = hit else {
            // A key inside a flow map on the item line (`- { mac: ... }`).
            if let (Step::Key(k), Some((line, _))) = (step, found)
                && let Some(c) = lines[line - 1]
                    .as_ref()
                    .and_then(|l| find_flow_key(l.text, k))
            {
                return Some((line, c + 1));
            }
            return found;
        };
        found = Some((n + 1, col + 1));
        // The next step searches what this one contains.
        let is_item = matches!(step, Step::Index(_));
        from = if is_item { n } else { n + 1 };
        to = (n + 1..lines.len())
            .find(|&m| match &lines[m] {
                None => false,
                Some(l) if is_item => l.indent <= col,
                Some(l) => l.indent < col || (l.indent == col && l.dash.is_none()),
            })
            .unwrap_or(lines.len());
    }
    found
}

fn key_of(body: &str) -> Option<&str> {
    if body.starts_with('{') || body.starts_with('[') {
        return None;
    }
    // A quoted key may hold a colon: `"x:y": ...`.
    if let Some(q) = body.chars().next().filter(|c| matches!(c, '"' | '\''))
        && let Some(end) = body[1..].find(q)
        && let Some(rest) = body[end + 2..].strip_prefix(':')
        && (rest.is_empty() || rest.starts_with(' '))
    {
        let key = &body[1..end + 1];
        return (!key.is_empty()).then_some(key);
    }
    let (key, rest) = body.split_once(':')?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    let key = key.trim().trim_matches('"').trim_matches('\'');
    (!key.is_empty()).then_some(key)
}

fn find_flow_key(line: &str, key: &str) -> Option<usize> {
    let needle = format!("{key}:");
    line.match_indices(&needle)
        .find(|(at, _)| matches!(line[..*at].chars().last(), Some('{' | ' ' | ',')))
        .map(|(at, _)| at)
}

fn strip_comment(line: &str) -> &str {
    // A '#' starts a comment at the line start or after white space, outside quotes.
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
server:
  address: 10.77.0.1   # comment
dhcp:
  subnet: 10.77.0.0/24
pools:
  room-101:
    image: demo
    clients:
      - { mac: \"52:54:00:77:00:01\", name: pc01 }
      - mac: bad
        name: pc02
  room-102:
    image: other
";

    fn at(path: &[Step]) -> Option<(usize, usize)> {
        locate(TEXT, path)
    }

    #[test]
    fn finds_nested_keys() {
        assert_eq!(
            at(&[Step::Key("server"), Step::Key("address")]),
            Some((2, 3))
        );
        assert_eq!(
            at(&[
                Step::Key("pools"),
                Step::Key("room-102"),
                Step::Key("image")
            ]),
            Some((13, 5))
        );
        assert_eq!(
            at(&[
                Step::Key("pools"),
                Step::Key("room-101"),
                Step::Key("image")
            ]),
            Some((7, 5))
        );
    }

    #[test]
    fn finds_list_items_and_their_keys() {
        let p = |i, k| {
            [
                Step::Key("pools"),
                Step::Key("room-101"),
                Step::Key("clients"),
                Step::Index(i),
                Step::Key(k),
            ]
        };
        assert_eq!(at(&p(0, "mac")), Some((9, 11)));
        assert_eq!(at(&p(1, "mac")), Some((10, 9)));
        assert_eq!(at(&p(1, "name")), Some((11, 9)));
    }

    #[test]
    fn missing_key_gives_deepest_known_position() {
        assert_eq!(at(&[Step::Key("dhcp"), Step::Key("range")]), Some((3, 1)));
        assert_eq!(at(&[Step::Key("nowhere")]), None);
    }
}
