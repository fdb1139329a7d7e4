//! Tables as OpenZFS's zpool/zfs print them: a header row, columns two spaces apart, numbers
//! right-aligned; with -H no header and tab-separated fields.

pub fn render(header: &[&str], rows: &[Vec<String>], right: &[bool], scripted: bool, no_header: bool) -> String {
    let mut out = String::new();
    if scripted {
        for r in rows {
            out.push_str(&r.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| -> String {
        let n = cells.len();
        let mut s = String::new();
        for (i, c) in cells.into_iter().enumerate() {
            let pad = w[i].saturating_sub(c.chars().count());
            if right.get(i).copied().unwrap_or(false) {
                s.push_str(&" ".repeat(pad));
                s.push_str(&c);
            } else {
                s.push_str(&c);
                if i + 1 < n {
                    s.push_str(&" ".repeat(pad));
                }
            }
            if i + 1 < n {
                s.push_str("  ");
            }
        }
        s.trim_end().to_string() + "\n"
    };
    if !no_header {
        out.push_str(&line(header.iter().map(|h| h.to_string()).collect()));
    }
    for r in rows {
        out.push_str(&line(r.clone()));
    }
    out
}
