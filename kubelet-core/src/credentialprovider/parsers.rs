//! The repository an image is pulled from, as upstream `pkg/util/parsers.ParseImageName`
//! (docker's `reference.ParseNormalizedNamed(image).Name()`).

use super::{Error, Result};

const DEFAULT_DOMAIN: &str = "docker.io";
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
const OFFICIAL_REPO_PREFIX: &str = "library/";

/// The normalised repository of `image`, without tag or digest: `busybox:1.36` →
/// `docker.io/library/busybox`, `127.0.0.1:5000/app:latest` → `127.0.0.1:5000/app`. This
/// is what the keyring is searched with.
pub fn repo_to_pull(image: &str) -> Result<String> {
    let invalid = |reason| Error::ImageName {
        image: image.to_owned(),
        reason,
    };
    if image.is_empty() || image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("invalid reference format"));
    }
    let without_digest = image.split_once('@').map_or(image, |(name, _)| name);
    let last_slash = without_digest.rfind('/').map_or(0, |i| i + 1);
    let name = match without_digest[last_slash..].rfind(':') {
        Some(i) => &without_digest[..last_slash + i],
        None => without_digest,
    };
    let (domain, remainder) = split_docker_domain(name);
    if remainder.is_empty() || domain.is_empty() {
        return Err(invalid("invalid reference format"));
    }
    if remainder.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(invalid("repository name must be lowercase"));
    }
    let path_ok = remainder.split('/').all(|component| {
        !component.is_empty()
            && component
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
            && component.starts_with(|c: char| c.is_ascii_alphanumeric())
            && component.ends_with(|c: char| c.is_ascii_alphanumeric())
    });
    if !path_ok {
        return Err(invalid("invalid reference format"));
    }
    Ok(format!("{domain}/{remainder}"))
}

/// Docker's `splitDockerDomain`: the first component is a registry when it has a `.` or `:`,
/// is `localhost`, or has upper case; Docker Hub's official images get `library/`.
fn split_docker_domain(name: &str) -> (&str, String) {
    let (mut domain, remainder) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.to_lowercase() != first =>
        {
            (first, rest.to_owned())
        }
        _ => (DEFAULT_DOMAIN, name.to_owned()),
    };
    if domain == LEGACY_DEFAULT_DOMAIN {
        domain = DEFAULT_DOMAIN;
    }
    if domain == DEFAULT_DOMAIN && !remainder.contains('/') {
        return (domain, format!("{OFFICIAL_REPO_PREFIX}{remainder}"));
    }
    (domain, remainder)
}

#[cfg(test)]
mod tests {
    use super::repo_to_pull;

    #[test]
    fn normalises_like_parse_image_name() {
        for (image, want) in [
            ("busybox", "docker.io/library/busybox"),
            ("busybox:1.36", "docker.io/library/busybox"),
            (
                "docker.io/library/busybox:latest",
                "docker.io/library/busybox",
            ),
            (
                "index.docker.io/library/busybox",
                "docker.io/library/busybox",
            ),
            ("index.docker.io/busybox", "docker.io/library/busybox"),
            ("user/app", "docker.io/user/app"),
            ("localhost/app:v1", "localhost/app"),
            (
                "127.0.0.1:5000/library/busybox:latest",
                "127.0.0.1:5000/library/busybox",
            ),
            (
                "registry.example:5000/a/b/c@sha256:abcd",
                "registry.example:5000/a/b/c",
            ),
            ("gcr.io/project/app:1.0@sha256:abcd", "gcr.io/project/app"),
        ] {
            assert_eq!(repo_to_pull(image).expect(image), want, "{image}");
        }
        for bad in [
            "",
            "Busybox",
            "bad image",
            "registry.example/App",
            "a//b",
            "r.example/",
        ] {
            assert!(repo_to_pull(bad).is_err(), "{bad:?}");
        }
    }
}
