#!/usr/bin/env bash
# Installs the Debian packages the test suite runs for real: Prometheus (scrapes the monitor's
# /metrics and /probe) and Alertmanager (receives the monitor's alerts), used by
# crates/mcpulse/tests/prometheus.rs and scaleout.rs, which start their own instances on loopback
# ports chosen at run time and fail when /usr/bin/prometheus or /usr/bin/prometheus-alertmanager
# is missing; zsh, fish, groff-base, systemd and python3-yaml for packaging.rs (below); sqlite3
# for history.rs; and Chromium, which crates/mcpulse/tests/browser.rs drives headless (the
# status page in a real browser, over the DevTools protocol; chromium-common and its libraries
# come with it).
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
#
# systemd is pinned to its upstream series only (252.*): the tests need nothing but
# systemd-analyze, and systemd must be at exactly the version of libsystemd0, which apt itself
# depends on and every Debian 12 point release moves (12.12 ships 252.39-1~deb12u2). The
# version taken is the installed libsystemd0's when the archive offers it, so nothing is ever
# downgraded.
#
# `scripts/ci-packages.sh --plan` prints the package=version list an install would ask for,
# one a line, without root, `apt-get update` or any change (crates/mcpulse/tests/packaging.rs
# runs it against a simulated point release).
set -euo pipefail

plan=0
if [ "${1:-}" = --plan ]; then plan=1; fi

# package  version (a Debian version: this, or this plus a +bN / +deb12uN suffix; a version
# ending in ".*" is a series: any version starting with what comes before the "*")
PINS=(
  "prometheus 2.42.0+ds-5"
  "prometheus-alertmanager 0.25.0-1"
  "zsh 5.9-4"
  "fish 3.6.0-3.1"
  "groff-base 1.22.4-10"
  "systemd 252.*"
  "python3-yaml 6.0-3"
  # The sqlite3 CLI reads the monitor's history while it runs (crates/mcpulse/tests/history.rs).
  "sqlite3 3.40.1-2"
  # Chromium for crates/mcpulse/tests/browser.rs: a soft pin (SOFT, below).
  "chromium 156.*"
)
BINARIES=(/usr/bin/prometheus /usr/bin/prometheus-alertmanager /usr/bin/sqlite3 /usr/bin/chromium)
BINARY_PACKAGES=(prometheus prometheus-alertmanager sqlite3 chromium)
# Debian 12 ships Chromium only through bookworm-security, which keeps the newest build alone:
# the series the browser tests were written against (156) is asked for, and when the archive has
# moved past it the newest build is installed with a warning instead of failing the whole run
# (the tests drive it through the pinned playwright-core and the stable DevTools protocol).
SOFT=(chromium)
# crates/mcpulse/tests/packaging.rs: the completions run in zsh and fish, the man pages in
# groff, the systemd units through systemd-analyze verify (systemd is not started), the CI
# workflow example is read with python3-yaml.
BINARIES+=(/usr/bin/zsh /usr/bin/fish /usr/bin/groff /usr/bin/systemd-analyze)
BINARY_PACKAGES+=(zsh fish groff-base systemd)

say() { echo "ci-packages: $*" >&2; }

pinned() { # version pin -> 0 when the version is the pin or a rebuild/update of it
  case "$2" in *.\*) case "$1" in "${2%\*}"*) return 0 ;; *) return 1 ;; esac ;; esac
  case "$1" in "$2" | "$2"+b[0-9]* | "$2"+deb[0-9]*) return 0 ;; *) return 1 ;; esac
}

soft() { # package -> 0 when its pin is soft (SOFT, above)
  [[ " ${SOFT[*]} " == *" $1 "* ]]
}

installed() { # package pin -> 0 when a version matching the pin (any, for a soft pin) is installed
  local got
  got="$(dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null || true)"
  case "$got" in
    "install ok installed "*) soft "$1" || pinned "${got#install ok installed }" "$2" ;;
    *) return 1 ;;
  esac
}

missing=()
for pin in "${PINS[@]}"; do
  read -r pkg version <<<"$pin"
  installed "$pkg" "$version" || missing+=("$pkg")
done
reinstall=()
if [ "$plan" = 1 ]; then
  missing=()
  for pin in "${PINS[@]}"; do
    read -r pkg version <<<"$pin"
    missing+=("$pkg")
  done
elif [ "${#missing[@]}" -eq 0 ]; then
  for b in "${BINARIES[@]}"; do
    [ -x "$b" ] || reinstall=(--reinstall)
  done
  if [ "${#reinstall[@]}" -eq 0 ]; then
    say "already installed: $(dpkg-query -W -f='${Package} ${Version}  ' "${BINARY_PACKAGES[@]}")"
    exit 0
  fi
  missing=("${BINARY_PACKAGES[@]}") # installed, but a binary was removed by hand
fi

choose() { # package pin -> the version to install, or nothing
  local pkg="$1" version="$2" candidate offered v
  if [ "$pkg" = systemd ]; then
    # systemd Depends on libsystemd0 (= its own version): take the installed one's.
    v="$(dpkg-query -W -f='${Status} ${Version}' libsystemd0 2>/dev/null || true)"
    case "$v" in "install ok installed "*)
      v="${v#install ok installed }"
      if pinned "$v" "$version" &&
        apt-cache madison "$pkg" | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF "$v"; then
        echo "$v"
        return 0
      fi ;;
    esac
  fi
  candidate="$(apt-cache policy "$pkg" | sed -n 's/^ *Candidate: *//p')"
  if [ -n "$candidate" ] && [ "$candidate" != "(none)" ] && pinned "$candidate" "$version"; then
    echo "$candidate"
    return 0
  fi
  # The newest build may be past the pin while the archive (bookworm-security, say) still
  # holds the pinned one: take that.
  while read -r v; do
    if pinned "$v" "$version"; then echo "$v"; return 0; fi
  done < <(apt-cache madison "$pkg" | awk -F'|' '{gsub(/ /, "", $2); print $2}')
  if soft "$pkg" && [ -n "$candidate" ] && [ "$candidate" != "(none)" ]; then
    say "WARNING: $pkg: the archive has moved past $version; installing its newest build, $candidate"
    echo "$candidate"
    return 0
  fi
  say "$pkg: the package lists offer ${candidate:-nothing}, not $version (Debian 12 bookworm is expected)"
  return 1
}

if [ "$plan" = 1 ]; then
  for pin in "${PINS[@]}"; do
    read -r pkg version <<<"$pin"
    echo "$pkg=$(choose "$pkg" "$version")"
  done
  exit 0
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
  candidate="$(choose "$pkg" "$version")" || exit 1
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
