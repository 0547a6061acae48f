//! Connection strings as libpq reads them: the URL form
//! (`postgresql://user:pw@host:port,host2/db?key=value`) and the
//! `key=value` form (values quoted with `'`, `\` escapes), both into one
//! list of libpq parameters.
//!
//! A reason for refusing a string never quotes the string: any part of it
//! may be a password (a typo turns `postgres://` into `postgres//`, and
//! then the whole string is one odd "parameter name"). The caller shows the
//! string through [`crate::db::redact_url`].

/// The parameters a string names, in order, each once (a later value
/// replaces an earlier one, as in libpq).
pub(crate) type Params = Vec<(String, String)>;

/// Sets `key` to `value` in `params`, replacing an earlier value.
pub(crate) fn set(params: &mut Params, key: &str, value: String) {
    match params.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => params.push((key.to_owned(), value)),
    }
}

/// The value of `key` in `params`.
pub(crate) fn get<'a>(params: &'a Params, key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Parses a connection string in either form. The error is the reason,
/// never quoting the string.
pub(crate) fn parse(text: &str) -> Result<Params, String> {
    for scheme in ["postgresql://", "postgres://"] {
        if let Some(rest) = text.strip_prefix(scheme) {
            return parse_uri(rest);
        }
    }
    parse_key_values(text)
}

/// `rest` is everything after `postgresql://`.
fn parse_uri(rest: &str) -> Result<Params, String> {
    let mut params = Params::new();
    let (main, query) = match rest.split_once('?') {
        Some((main, query)) => (main, Some(query)),
        None => (rest, None),
    };
    // libpq: the user part ends at the first `@`, unless a `/` comes first.
    let authority_end = main.find('/').unwrap_or(main.len());
    let (authority, path) = main.split_at(authority_end);
    let hosts = match authority.find('@') {
        Some(at) => {
            let (user, password) = match authority[..at].split_once(':') {
                Some((user, password)) => (user, Some(password)),
                None => (&authority[..at], None),
            };
            if !user.is_empty() {
                set(&mut params, "user", decode(user)?);
            }
            if let Some(password) = password {
                set(&mut params, "password", decode(password)?);
            }
            &authority[at + 1..]
        }
        None => authority,
    };
    parse_uri_hosts(hosts, &mut params)?;
    if let Some(db) = path.strip_prefix('/').filter(|db| !db.is_empty()) {
        set(&mut params, "dbname", decode(db)?);
    }
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        if pair.is_empty() {
            continue;
        }
        let Some((key, value)) = pair.split_once('=') else {
            return Err(
                "a URL parameter has no \"=\" (each must read key=value, joined by &)".into(),
            );
        };
        let key = decode(key)?;
        let value = decode(value)?;
        // libpq takes JDBC's `ssl=true` as `sslmode=require`.
        if key == "ssl" && value == "true" {
            set(&mut params, "sslmode", "require".into());
        } else {
            set(&mut params, &key, value);
        }
    }
    Ok(params)
}

/// `host[:port]` entries separated by commas, an IPv6 address in `[]`.
fn parse_uri_hosts(hosts: &str, params: &mut Params) -> Result<(), String> {
    if hosts.is_empty() {
        return Ok(());
    }
    let mut names = Vec::new();
    let mut ports = Vec::new();
    for entry in hosts.split(',') {
        let (host, port) = if let Some(v6) = entry.strip_prefix('[') {
            let Some((host, after)) = v6.split_once(']') else {
                return Err("an IPv6 host address in the URL lacks its closing \"]\"".into());
            };
            match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => {
                        return Err("unexpected text after an IPv6 host address in the URL".into());
                    }
                },
            }
        } else {
            match entry.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (entry, None),
            }
        };
        names.push(decode(host)?);
        ports.push(port.map(decode).transpose()?.unwrap_or_default());
    }
    if names.iter().any(|h| !h.is_empty()) {
        set(params, "host", names.join(","));
    }
    if ports.iter().any(|p| !p.is_empty()) {
        set(params, "port", ports.join(","));
    }
    Ok(())
}

/// Percent-decoding, as libpq does it: `%XX` only (a `+` stays a `+`).
fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = hex else {
                return Err("invalid percent-encoding in the URL (% must start %XX)".into());
            };
            if byte == 0 {
                return Err("the URL encodes a zero byte (%00)".into());
            }
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the URL decodes to text that is not UTF-8".to_owned())
}

/// The `key = value` form: whitespace around `=` allowed; a value is
/// `'quoted'` or runs to the next whitespace; `\` escapes the next
/// character in either.
fn parse_key_values(text: &str) -> Result<Params, String> {
    let mut params = Params::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(params);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!(
                "expected key=value pairs or a postgresql:// URL, but {} is not followed by \"=\"",
                shown_key(&key)
            ));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => {
                        return Err(format!(
                            "the quoted value of {} has no closing quote",
                            shown_key(&key)
                        ));
                    }
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        set(&mut params, &key, value);
    }
}

/// A parameter name as a message may quote it: only a plain lower-case
/// name that does not look secret; anything else might be a mangled
/// `user:password@host`.
pub(crate) fn shown_key(key: &str) -> String {
    let plain = !key.is_empty()
        && key.len() <= 40
        && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    if plain && !crate::db::is_secret_key(key) {
        format!("\"{key}\"")
    } else {
        "a parameter name".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(params: &Params) -> Vec<(&str, &str)> {
        params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn both_forms_give_libpq_parameters() {
        let url = parse(
            "postgresql://al%40ice:p%3Aw@db.example:6543,[::1]:7/chess?sslmode=verify-full&application_name=x",
        )
        .expect("valid");
        assert_eq!(
            pairs(&url),
            [
                ("user", "al@ice"),
                ("password", "p:w"),
                ("host", "db.example,::1"),
                ("port", "6543,7"),
                ("dbname", "chess"),
                ("sslmode", "verify-full"),
                ("application_name", "x"),
            ]
        );
        let socket = parse("postgres:///pgnload?host=%2Ftmp%2Fx&port=5432&ssl=true").expect("ok");
        assert_eq!(
            pairs(&socket),
            [
                ("dbname", "pgnload"),
                ("host", "/tmp/x"),
                ("port", "5432"),
                ("sslmode", "require")
            ]
        );
        let kv = parse(r"host = db  password='it\'s a secret' dbname=c\ d user=a").expect("ok");
        assert_eq!(
            pairs(&kv),
            [
                ("host", "db"),
                ("password", "it's a secret"),
                ("dbname", "c d"),
                ("user", "a")
            ]
        );
        assert_eq!(pairs(&parse("  ").expect("empty is valid")), []);
    }

    #[test]
    fn refusals_never_quote_the_string() {
        for text in [
            "postgres//chess:hunter2@127.0.0.1:55100/chess",
            "host=db password hunter2",
            "host=db password='hunter2",
            "postgresql://u:hunter2%zz@h/db",
            "postgresql://u:pw@h/db?hunter2",
            "postgresql://u:pw@[hunter2/db",
        ] {
            let reason = parse(text).expect_err(text);
            assert!(!reason.contains("hunter2"), "{text} → {reason}");
            assert!(!reason.contains("chess"), "{text} → {reason}");
        }
        assert_eq!(
            parse("host=db dbname").expect_err("no ="),
            "expected key=value pairs or a postgresql:// URL, but \"dbname\" is not followed by \"=\""
        );
    }
}
