//! Grafana's search-path subquery, made plannable before datafusion-pg-catalog's parser
//! stubs it out.
//!
//! Grafana's PostgreSQL data source lists tables and columns "on the search path" with
//! `quote_ident(table_schema) IN (SELECT CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE
//! trim(s[i]) END FROM generate_series(array_lower(…), array_upper(…)) AS i,
//! string_to_array(current_setting('search_path'), ',') s)`. datafusion-pg-catalog's parser
//! replaces exactly that subquery with `''` (a blacklist entry from before
//! `current_setting` existed), so nothing is on the path: tables come back
//! schema-qualified and a table's columns not at all. DataFusion cannot plan the original
//! either (a function's array result as a FROM item, `user` as a function), nor an `IN`
//! subquery in `ORDER BY`, where Grafana repeats it. So, before that parser sees the
//! statement, `IN (<that subquery>)` (matched token for token, as the blacklist matches
//! it) becomes `= ANY(<the search path as an array>)`: each entry trimmed, `"$user"` as the
//! session's user, the same set of names the subquery yields.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// Grafana's subquery (public/app/plugins/datasource/grafana-postgresql-datasource/
/// postgresMetaQuery.ts, `buildSchemaConstraint`).
const GRAFANA: &str = r#"IN (
  SELECT
    CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
  FROM
    generate_series(
      array_lower(string_to_array(current_setting('search_path'),','),1),
      array_upper(string_to_array(current_setting('search_path'),','),1)
    ) as i,
    string_to_array(current_setting('search_path'),',') s
)"#;

/// The same names, as an array DataFusion compares with.
const PLANNABLE: &str = r#"= ANY(array_replace(string_to_array(regexp_replace(trim(current_setting('search_path')), '\s*,\s*', ',', 'g'), ','), '"$user"', current_user))"#;

fn tokens(sql: &str) -> Option<Vec<Token>> {
    Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()
}

fn significant(token: &Token) -> bool {
    !matches!(token, Token::Whitespace(_))
}

/// `sql` with each `IN` over Grafana's search-path subquery replaced by [`PLANNABLE`]; `None`
/// when it has none.
pub fn rewrite(sql: &str) -> Option<String> {
    if !sql.to_ascii_lowercase().contains("search_path") {
        return None;
    }
    // The pattern's tokens, made once for the process.
    static PATTERN: std::sync::LazyLock<Vec<Token>> = std::sync::LazyLock::new(|| {
        tokens(GRAFANA)
            .unwrap_or_default()
            .into_iter()
            .filter(significant)
            .collect()
    });
    let pattern = PATTERN.as_slice();
    if pattern.is_empty() {
        return None;
    }
    let all = tokens(sql)?;
    // Positions of the significant tokens in `all`.
    let kept: Vec<usize> = (0..all.len()).filter(|&i| significant(&all[i])).collect();
    let mut out = String::with_capacity(sql.len());
    let mut next = 0; // the first token of `all` not yet written
    let mut k = 0;
    let mut changed = false;
    while k + pattern.len() <= kept.len() {
        if (0..pattern.len()).all(|j| all[kept[k + j]] == pattern[j]) {
            let (first, last) = (kept[k], kept[k + pattern.len() - 1]);
            all[next..first]
                .iter()
                .for_each(|t| out.push_str(&t.to_string()));
            out.push_str(PLANNABLE);
            next = last + 1;
            k += pattern.len();
            changed = true;
        } else {
            k += 1;
        }
    }
    all[next..]
        .iter()
        .for_each(|t| out.push_str(&t.to_string()));
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_subquery_whatever_its_spacing() {
        let sql = format!(
            "SELECT 1 WHERE x {}\n AND y {} ORDER BY 1",
            GRAFANA.replace('\n', " ").replace("( ", "("),
            GRAFANA
        );
        let out = rewrite(&sql).unwrap();
        assert_eq!(out.matches("= ANY(array_replace").count(), 2, "{out}");
        assert!(!out.contains("generate_series"), "{out}");
        assert!(out.starts_with("SELECT 1 WHERE x = ANY("), "{out}");
        assert!(out.ends_with(" ORDER BY 1"), "{out}");
    }

    #[test]
    fn leaves_other_statements_alone() {
        assert_eq!(rewrite("SELECT current_setting('search_path')"), None);
        assert_eq!(rewrite("SELECT 1"), None);
    }
}
