//! Who may log in: the users the server accepts with their SCRAM salted passwords (one
//! user from the environment, or a users file), `evalsql passwd` that writes a users-file
//! line, and the roles `pg_roles` shows.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use datafusion::common::{DataFusionError, Result};
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::{
    PgCatalogContextProvider, Role,
};
use datafusion_postgres::pgwire;
use pgwire::api::auth::sasl::scram::{SCRAM_ITERATIONS, gen_salted_password};
use pgwire::api::auth::{AuthSource, LoginInfo, Password};
use pgwire::error::PgWireResult;

/// The scheme tag of a users-file hash.
const HASH_SCHEME: &str = "scram-sha-256";

/// The users the server accepts, with their SCRAM salted passwords.
#[derive(Debug)]
pub struct Users {
    pub(super) by_name: HashMap<String, (Vec<u8>, Vec<u8>)>,
    pub(super) iterations: usize,
    /// A secret of this process from which unknown names get a salt and key of their own,
    /// stable per name, so they fail exactly as a wrong password does and their salts do
    /// not give them away.
    pub(super) decoy_secret: Vec<u8>,
}

impl Users {
    /// From `--users FILE`, else `EVALSQL_PG_USER` / `EVALSQL_PG_PASSWORD`; without either
    /// the server does not start.
    pub fn load(file: Option<&Path>) -> Result<Self> {
        let decoy_secret = random_bytes(32)?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                DataFusionError::Configuration(format!("--users {}: {e}", path.display()))
            })?;
            let mut by_name = HashMap::new();
            let mut iterations = None;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let bad = |why: &str| {
                    DataFusionError::Configuration(format!(
                        "--users {} line {}: {why} (expected name:{HASH_SCHEME}$ITERATIONS$SALT$KEY \
                         as printed by `evalsql passwd NAME`)",
                        path.display(),
                        n + 1
                    ))
                };
                let (name, hash) = line.split_once(':').ok_or_else(|| bad("no ':'"))?;
                let (iters, salt, salted) = parse_hash(hash).ok_or_else(|| bad("not a hash"))?;
                if *iterations.get_or_insert(iters) != iters {
                    return Err(bad("all hashes must use the same iteration count"));
                }
                if by_name.insert(name.to_string(), (salt, salted)).is_some() {
                    return Err(bad(&format!("user {name:?} appears twice")));
                }
            }
            if by_name.is_empty() {
                return Err(DataFusionError::Configuration(format!(
                    "--users {}: no users",
                    path.display()
                )));
            }
            return Ok(Users {
                by_name,
                iterations: iterations.unwrap_or(SCRAM_ITERATIONS),
                decoy_secret,
            });
        }
        match (
            std::env::var("EVALSQL_PG_USER"),
            std::env::var("EVALSQL_PG_PASSWORD"),
        ) {
            (Ok(user), Ok(password)) if !user.is_empty() && !password.is_empty() => {
                let salt = random_bytes(16)?;
                let salted = gen_salted_password(&password, &salt, SCRAM_ITERATIONS);
                Ok(Users {
                    by_name: HashMap::from([(user, (salt, salted))]),
                    iterations: SCRAM_ITERATIONS,
                    decoy_secret,
                })
            }
            _ => Err(DataFusionError::Configuration(
                "evalsql serve requires a password: set EVALSQL_PG_USER and EVALSQL_PG_PASSWORD, \
                 or pass --users FILE (lines made by `evalsql passwd NAME`)"
                    .into(),
            )),
        }
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[async_trait]
impl AuthSource for Users {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let name = login.user().unwrap_or_default();
        if let Some((salt, salted)) = self.by_name.get(name) {
            return Ok(Password::new(Some(salt.clone()), salted.clone()));
        }
        // HMAC-based derivations (PBKDF2 with one round) of the name under the secret.
        let salt = gen_salted_password(name, &self.decoy_secret, 1)[..16].to_vec();
        let key = gen_salted_password(&format!("key:{name}"), &self.decoy_secret, 1);
        Ok(Password::new(Some(salt), key))
    }
}

/// The users-file line of `name` with `password`: `name:scram-sha-256$4096$SALT$KEY`, where
/// KEY is SCRAM's SaltedPassword (PBKDF2-HMAC-SHA-256). It stands in for the password when
/// logging in to this server, so keep the file private, as PostgreSQL's own hashes.
pub fn hash_line(name: &str, password: &str) -> Result<String> {
    if name.is_empty() || name.contains(':') || name.chars().any(char::is_whitespace) {
        return Err(DataFusionError::Configuration(format!(
            "evalsql passwd: {name:?} is not a usable user name (no ':' or spaces)"
        )));
    }
    let salt = random_bytes(16)?;
    let salted = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
    Ok(format!(
        "{name}:{HASH_SCHEME}${SCRAM_ITERATIONS}${}${}",
        BASE64.encode(&salt),
        BASE64.encode(&salted)
    ))
}

fn parse_hash(hash: &str) -> Option<(usize, Vec<u8>, Vec<u8>)> {
    let mut parts = hash.split('$');
    if parts.next()? != HASH_SCHEME {
        return None;
    }
    let iterations: usize = parts.next()?.parse().ok().filter(|&i| i >= 4096)?;
    let salt = BASE64.decode(parts.next()?).ok()?;
    let salted = BASE64
        .decode(parts.next()?)
        .ok()
        .filter(|k| k.len() == 32)?;
    parts.next().is_none().then_some((iterations, salt, salted))
}

fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    getrandom_v02::getrandom(&mut buf)
        .map_err(|e| DataFusionError::External(format!("no random source: {e}").into()))?;
    Ok(buf)
}

/// `evalsql passwd NAME [--users FILE]`: asks for the password (twice on a terminal; one
/// line from stdin otherwise) and prints the users-file line, or adds / replaces it in FILE.
pub fn passwd(name: &str, users: Option<&Path>) -> Result<()> {
    use std::io::IsTerminal;
    let password = if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(format!("password for {name}: "))?;
        let again = rpassword::prompt_password("again: ")?;
        if first != again {
            return Err(DataFusionError::Configuration(
                "evalsql passwd: the passwords differ".into(),
            ));
        }
        first
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_string()
    };
    if password.is_empty() {
        return Err(DataFusionError::Configuration(
            "evalsql passwd: empty password".into(),
        ));
    }
    let line = hash_line(name, &password)?;
    let Some(file) = users else {
        println!("{line}");
        return Ok(());
    };
    let existing = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(DataFusionError::Execution(format!(
                "cannot read {}: {e}",
                file.display()
            )));
        }
    };
    let prefix = format!("{name}:");
    let mut lines: Vec<String> = existing
        .lines()
        .filter(|l| !l.trim_start().starts_with(&prefix))
        .map(str::to_string)
        .collect();
    lines.push(line);
    write_private(file, &(lines.join("\n") + "\n"))?;
    eprintln!("{}: set the password of {name}", file.display());
    Ok(())
}

/// Replaces `path` with `text`, readable by its owner only, atomically: a temporary file
/// of mode 0600 beside it is written, synced and renamed over it, so a crash leaves the old
/// file or the new one, never half of one, and never a moment with other permissions.
fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |e: std::io::Error| {
        DataFusionError::Execution(format!("cannot write {}: {e}", path.display()))
    };
    let name = path
        .file_name()
        .ok_or_else(|| fail(std::io::Error::other("not a file name")))?;
    let temporary = path.with_file_name(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.map_err(fail)
}

/// The users, as `pg_roles` shows them.
#[derive(Debug, Clone)]
pub(super) struct Roles(pub(super) Arc<Users>);

#[async_trait]
impl PgCatalogContextProvider for Roles {
    // pg_roles and pg_user list no user: a client would learn every other user's name.
    async fn roles(&self) -> Vec<String> {
        Vec::new()
    }

    // pg_roles asks for every name `roles` gave (and unwraps the answer).
    async fn role(&self, name: &str) -> Option<Role> {
        self.0.by_name.contains_key(name).then(|| Role {
            name: name.to_string(),
            is_superuser: false,
            can_login: true,
            can_create_db: false,
            can_create_role: false,
            can_create_user: false,
            can_replication: false,
            grants: vec![],
            inherited_roles: vec![],
        })
    }
}

// ---------------------------------------------------------------------------------------
// What clients may not do

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_round_trip_and_verify_like_scram() {
        let line = hash_line("alice", "s3cret").unwrap();
        let (name, hash) = line.split_once(':').unwrap();
        assert_eq!(name, "alice");
        let (iters, salt, salted) = parse_hash(hash).unwrap();
        assert_eq!(iters, SCRAM_ITERATIONS);
        assert_eq!(salted, gen_salted_password("s3cret", &salt, iters));
        assert_ne!(salted, gen_salted_password("s3cret!", &salt, iters));
        // A fresh salt every time.
        assert_ne!(line, hash_line("alice", "s3cret").unwrap());
        assert!(hash_line("a:b", "x").is_err());
        assert!(parse_hash("md5$abc").is_none());
        assert!(parse_hash(&format!("{HASH_SCHEME}$100$AAAA$AAAA")).is_none());
    }
}
