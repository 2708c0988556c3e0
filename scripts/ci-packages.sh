#!/usr/bin/env bash
# Installs the Debian packages the test suite runs for real: Prometheus (scrapes the monitor's
# /metrics and /probe) and Alertmanager (receives the monitor's alerts), used by
# crates/mcpulse/tests/prometheus.rs, which starts its own instances on loopback ports chosen at
# run time and fails when /usr/bin/prometheus or /usr/bin/prometheus-alertmanager is missing.
# Also Chromium, which crates/mcpulse/tests/browser.rs drives headless (the status page in a real
# browser, over the DevTools protocol; chromium-common and its libraries come with it).
#
# Idempotent: when the pinned versions are already installed it only asks dpkg and exits
# (no root needed, no network). Otherwise it needs root (apt-get): run it as root, or give the
# user passwordless sudo; CI (.ci/run) runs as root.
#
# The packages' own services are never started: their postinst scripts go through invoke-rc.d,
# which asks /usr/sbin/policy-rc.d; a policy that answers 101 ("action forbidden") is in place
# for the whole install (the machine's own policy-rc.d, if any, is put back afterwards). The
# script then checks that nothing was left listening on the default ports 9090 and 9093.
#
# Versions are pinned to the upstream release and Debian revision (the tests are written
# against Prometheus 2.42 and Alertmanager 0.25 and their APIs). Debian 12 (bookworm) keeps only
# the newest build of each in its archive, and rebuilds (+b6) or stable updates (+deb12u1)
# replace one another there, so any build of the pinned revision is accepted: the exact one
# installed is whatever bookworm lists (`apt-cache policy prometheus prometheus-alertmanager`);
# at the time of writing 2.42.0+ds-5+deb12u1 and 0.25.0-1+b4.
set -euo pipefail

# package  version (a Debian version: this, or this plus a +bN / +deb12uN suffix)
PINS=(
  "prometheus 2.42.0+ds-5"
  "prometheus-alertmanager 0.25.0-1"
  "chromium 156.0.8078.114-1~deb12u1"
)
BINARIES=(/usr/bin/prometheus /usr/bin/prometheus-alertmanager /usr/bin/chromium)
BINARY_PACKAGES=(prometheus prometheus-alertmanager chromium)

say() { echo "ci-packages: $*" >&2; }

pinned() { # version pin -> 0 when the version is the pin or a rebuild/update of it
  case "$1" in "$2" | "$2"+b[0-9]* | "$2"+deb[0-9]*) return 0 ;; *) return 1 ;; esac
}

installed() { # package pin -> 0 when a version matching the pin is installed
  local got
  got="$(dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null || true)"
  case "$got" in "install ok installed "*) pinned "${got#install ok installed }" "$2" ;; *) return 1 ;; esac
}

missing=()
for pin in "${PINS[@]}"; do
  read -r pkg version <<<"$pin"
  installed "$pkg" "$version" || missing+=("$pkg")
done
reinstall=()
if [ "${#missing[@]}" -eq 0 ]; then
  for b in "${BINARIES[@]}"; do
    [ -x "$b" ] || reinstall=(--reinstall)
  done
  if [ "${#reinstall[@]}" -eq 0 ]; then
    say "already installed: $(dpkg-query -W -f='${Package} ${Version}  ' "${BINARY_PACKAGES[@]}")"
    exit 0
  fi
  missing=("${BINARY_PACKAGES[@]}") # installed, but a binary was removed by hand
fi

if ! command -v apt-get >/dev/null 2>&1; then
  say "apt-get is not available: install ${missing[*]} (Debian 12 packages) by other means"
  exit 1
fi
SUDO=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    say "${missing[*]} must be installed, which needs root: run 'sudo scripts/ci-packages.sh' (or run the tests as root)"
    exit 1
  fi
fi

# Forbid service starts while installing, whatever the machine's policy is.
policy=/usr/sbin/policy-rc.d
backup=""
if [ -e "$policy" ]; then
  backup="$(mktemp /tmp/policy-rc.d.mcpulse.XXXXXX)"
  "${SUDO[@]}" cp -p "$policy" "$backup"
fi
restore() {
  if [ -n "$backup" ]; then
    "${SUDO[@]}" cp -p "$backup" "$policy" && "${SUDO[@]}" rm -f "$backup"
  else
    "${SUDO[@]}" rm -f "$policy"
  fi
}
trap restore EXIT
printf '#!/bin/sh\n# written by mcpulse scripts/ci-packages.sh during an install\nexit 101\n' |
  "${SUDO[@]}" tee "$policy" >/dev/null
"${SUDO[@]}" chmod 755 "$policy"

export DEBIAN_FRONTEND=noninteractive
started=$SECONDS
apt_opts=(-o DPkg::Lock::Timeout=300 -q)
say "apt-get update"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" update >/dev/null
wanted=()
for pin in "${PINS[@]}"; do
  read -r pkg version <<<"$pin"
  [[ " ${missing[*]} " == *" $pkg "* ]] || continue
  candidate="$(apt-cache policy "$pkg" | sed -n 's/^ *Candidate: *//p')"
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ] || ! pinned "$candidate" "$version"; then
    say "$pkg: the package lists offer ${candidate:-nothing}, not $version (Debian 12 bookworm is expected)"
    exit 1
  fi
  wanted+=("$pkg=$candidate")
done
say "installing ${wanted[*]}"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y \
  --no-install-recommends "${reinstall[@]}" "${wanted[@]}" >/dev/null
say "installed in $((SECONDS - started))s"

for pin in "${PINS[@]}"; do
  read -r pkg version <<<"$pin"
  installed "$pkg" "$version" || { say "$pkg is not at version $version after the install"; exit 1; }
done
for b in "${BINARIES[@]}"; do
  [ -x "$b" ] || { say "$b is missing after the install"; exit 1; }
done

# No service of these packages may be left running (on the default ports 9090 and 9093).
if command -v ss >/dev/null 2>&1; then
  busy="$(ss -Hltnp '( sport = :9090 or sport = :9093 )' 2>/dev/null | grep -E '"prometheus' || true)"
  if [ -n "$busy" ]; then
    say "a packaged service was started by the install and listens on 9090/9093:"
    echo "$busy" >&2
    exit 1
  fi
fi
