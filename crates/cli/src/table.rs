//! Tables as OpenZFS's zpool/zfs print them: a header row, columns two spaces apart, each at
//! least as wide as its heading, its minimum (5 for numbers) and its widest value; numbers
//! right-aligned; the last column unpadded when left-aligned. With -H (scripted): no header,
//! fields separated by one tab.

#[derive(Clone, Debug)]
pub struct Col {
    pub header: String,
    pub right: bool,
    pub min: usize,
}

impl Col {
    pub fn left(h: &str) -> Col {
        Col { header: h.to_string(), right: false, min: 0 }
    }
}

pub fn render(cols: &[Col], rows: &[Vec<String>], scripted: bool, header: bool) -> String {
    let mut out = String::new();
    if scripted {
        for r in rows {
            out.push_str(&r.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let w: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let vals = rows.iter().filter_map(|r| r.get(i)).map(|v| v.chars().count()).max().unwrap_or(0);
            c.min.max(c.header.chars().count()).max(vals)
        })
        .collect();
    let line = |cells: &[String]| -> String {
        let mut s = String::new();
        for (i, c) in cols.iter().enumerate() {
            let v = cells.get(i).map(|s| s.as_str()).unwrap_or("-");
            if i > 0 {
                s.push_str("  ");
            }
            let pad = " ".repeat(w[i].saturating_sub(v.chars().count()));
            if c.right {
                s.push_str(&pad);
                s.push_str(v);
            } else {
                s.push_str(v);
                if i + 1 < cols.len() {
                    s.push_str(&pad);
                }
            }
        }
        s.push('\n');
        s
    };
    if header {
        out.push_str(&line(&cols.iter().map(|c| c.header.clone()).collect::<Vec<_>>()));
    }
    for r in rows {
        out.push_str(&line(r));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(h: &str, right: bool, min: usize) -> Col {
        Col { header: h.into(), right, min }
    }

    #[test]
    fn zpool_list_layout() {
        // As OpenZFS 2.1 prints a pool with no altroot.
        let cols = [
            c("NAME", false, 4),
            c("SIZE", true, 5),
            c("ALLOC", true, 5),
            c("FREE", true, 5),
            c("CKPOINT", true, 7),
            c("EXPANDSZ", true, 8),
            c("FRAG", true, 5),
            c("CAP", true, 5),
            c("DEDUP", true, 5),
            c("HEALTH", true, 8),
            c("ALTROOT", false, 7),
        ];
        let row: Vec<String> =
            ["tank", "9.50G", "110K", "9.50G", "-", "-", "0%", "0%", "1.00x", "ONLINE", "-"].iter().map(|s| s.to_string()).collect();
        let t = render(&cols, &[row.clone()], false, true);
        assert_eq!(
            t,
            "NAME   SIZE  ALLOC   FREE  CKPOINT  EXPANDSZ   FRAG    CAP  DEDUP    HEALTH  ALTROOT\n\
             tank  9.50G   110K  9.50G        -         -     0%     0%  1.00x    ONLINE  -\n"
        );
        assert_eq!(render(&cols, &[row], true, true), "tank\t9.50G\t110K\t9.50G\t-\t-\t0%\t0%\t1.00x\tONLINE\t-\n");
    }

    #[test]
    fn zfs_list_layout() {
        let cols = [c("NAME", false, 4), c("USED", true, 5), c("AVAIL", true, 5), c("REFER", true, 5), c("MOUNTPOINT", false, 10)];
        let rows = vec![
            vec!["tank".into(), "0".into(), "9.2G".into(), "24K".into(), "/tank".into()],
            vec!["tank/a".into(), "0".into(), "9.2G".into(), "24K".into(), "/tank/a".into()],
        ];
        assert_eq!(
            render(&cols, &rows, false, true),
            "NAME     USED  AVAIL  REFER  MOUNTPOINT\ntank        0   9.2G    24K  /tank\ntank/a      0   9.2G    24K  /tank/a\n"
        );
        assert_eq!(render(&cols, &rows, false, false).lines().count(), 2);
    }
}
