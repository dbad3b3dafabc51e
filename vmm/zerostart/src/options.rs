//! The `key=value[,key=value...]` option lists of `zerostart run` and
//! `zerostart launch` (cloud-hypervisor's style).

/// Errors in option values.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// An option list item without `=`.
    #[error("--{opt}: '{item}' is not key=value; write e.g. --{opt} {example}")]
    NotKeyValue {
        /// Option name.
        opt: &'static str,
        /// The item.
        item: String,
        /// A valid example.
        example: &'static str,
    },
    /// An unknown key.
    #[error("--{opt}: unknown key '{key}'; valid keys: {valid}")]
    UnknownKey {
        /// Option name.
        opt: &'static str,
        /// The key.
        key: String,
        /// Valid keys.
        valid: &'static str,
    },
    /// A value that does not parse.
    #[error("--{opt}: {key}='{value}' is invalid; {hint}")]
    BadValue {
        /// Option name.
        opt: &'static str,
        /// Key.
        key: &'static str,
        /// Value.
        value: String,
        /// What is valid.
        hint: &'static str,
    },
}

/// Splits `a=1,b=2` into pairs.
pub fn pairs(
    opt: &'static str,
    s: &str,
    example: &'static str,
) -> Result<Vec<(String, String)>, Error> {
    s.split(',')
        .filter(|i| !i.is_empty())
        .map(|item| {
            item.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| Error::NotKeyValue {
                    opt,
                    item: item.to_string(),
                    example,
                })
        })
        .collect()
}
