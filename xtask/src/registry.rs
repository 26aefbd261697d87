//! A private image registry on loopback that requires a password: Debian's `docker-registry`
//! (the CNCF distribution registry 2.8) with htpasswd basic auth, its storage under one
//! directory, holding the busybox test image pushed with `skopeo` from the local OCI layout
//! tarball ([`crate::images`]). Pods then pull `127.0.0.1:<port>/library/busybox:latest`
//! with pull policy Always; containerd 1.6 talks plain HTTP to localhost registries
//! (`127.0.0.1`, `localhost`, `::1`) without any mirror configuration, and the credentials
//! reach it through CRI `PullImageRequest.auth`.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! let registry = xtask::registry::Registry::start(
//!     std::path::Path::new("/tmp/registry"),
//!     "alice",
//!     "s3cret",
//! )?;
//! let image = registry.push_busybox("library/busybox:latest")?;
//! println!("pull {image} as alice");
//! # Ok(())
//! # }
//! ```

use std::{
    fs,
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};

use crate::{images, testbed, util};

/// A running registry; killed on drop.
#[derive(Debug)]
pub struct Registry {
    dir: PathBuf,
    port: u16,
    username: String,
    password: String,
    child: Child,
}

impl Registry {
    /// Starts `docker-registry` with everything under `dir` (emptied first) on a free loopback
    /// port, accepting only `username`/`password` (bcrypt htpasswd), and waits until it answers.
    ///
    /// Installs `docker-registry`, `skopeo` and `apache2-utils` when missing (needs root then).
    pub fn start(dir: &Path, username: &str, password: &str) -> Result<Registry> {
        testbed::ensure_packages()?;
        let _ = fs::remove_dir_all(dir);
        fs::create_dir_all(dir.join("data"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let htpasswd = util::output(Command::new("htpasswd").args(["-Bbn", username, password]))?;
        fs::write(dir.join("htpasswd"), htpasswd)?;
        let port = crate::ports::free_port()?;
        let config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {data}\n\
             http:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    realm: xtask-registry\n    \
             path: {htpasswd}\n",
            data = dir.join("data").display(),
            htpasswd = dir.join("htpasswd").display(),
        );
        let config_path = dir.join("config.yml");
        fs::write(&config_path, config)?;
        let log = fs::File::create(dir.join("registry.log"))?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start docker-registry")?;
        let mut registry = Registry {
            dir: dir.to_owned(),
            port,
            username: username.to_owned(),
            password: password.to_owned(),
            child,
        };
        let up = util::wait_until(Duration::from_secs(15), || {
            registry.status("/v2/").is_some_and(|s| s == 401)
        });
        if !up {
            let exited = registry.child.try_wait().ok().flatten();
            bail!(
                "docker-registry did not answer 401 on 127.0.0.1:{port}/v2/ (exit: {exited:?}): {}",
                util::tail(&dir.join("registry.log"), 20)
            );
        }
        Ok(registry)
    }

    /// `127.0.0.1:<port>`: the registry part of image references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The user name it accepts.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The password it accepts.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Its log (`registry.log` under its directory), e.g. to count authenticated pulls.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }

    /// Pushes the busybox test image as `<host>/<repo_tag>` (e.g. `library/busybox:latest`)
    /// and returns that reference.
    pub fn push_busybox(&self, repo_tag: &str) -> Result<String> {
        let tarballs = images::ensure_images(&images::default_dir())?;
        let reference = format!("{}/{repo_tag}", self.host());
        // The layout names each of its images by tag (`org.opencontainers.image.ref.name`);
        // `docker.io/library/busybox:latest` is one of them.
        let source = format!("oci-archive:{}:latest", tarballs.busybox.display());
        util::output(
            Command::new("skopeo")
                .args(["copy", "--insecure-policy", "--dest-tls-verify=false"])
                .arg("--dest-creds")
                .arg(format!("{}:{}", self.username, self.password))
                .arg(source)
                .arg(format!("docker://{reference}")),
        )
        .with_context(|| format!("cannot push busybox to {reference}"))?;
        Ok(reference)
    }

    /// The HTTP status of an anonymous `GET path`, `None` when it does not answer.
    fn status(&self, path: &str) -> Option<u16> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\n\r\n",
            self.port
        )
        .ok()?;
        let mut head = [0u8; 32];
        let n = stream.read(&mut head).ok()?;
        let line = String::from_utf8_lossy(&head[..n]);
        line.split_whitespace().nth(1)?.parse().ok()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
