#!/usr/bin/env bash
# Install Debian's Slurm for the batch's real-cluster selftest (autograder/selftests/test_batch_real_slurm.py):
# slurm-wlm (slurmctld, slurmd, the clients, munge), slurmdbd and MariaDB behind it (so that sacct
# answers). Nothing is configured or started here: autograder/selftests/local_slurm.py starts a one-node
# cluster of its own in a temp folder, and the packages' system services are left as Debian sets them.
#
#   bash autograder/selftests/install_slurm.sh     # setup.sh runs it; as root with apt-get, else it skips
#
# CS336_SKIP_SLURM=1 skips it. Exit status 0 when installed or skipped, 1 when apt-get failed.
set -uo pipefail

PACKAGES=(slurm-wlm slurmdbd mariadb-server munge)
say() { echo "[setup] slurm: $*"; }

if [ "${CS336_SKIP_SLURM:-}" = 1 ]; then
    say "skipped (CS336_SKIP_SLURM=1); the real-Slurm selftest will be skipped"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
    say "skipped installing ${PACKAGES[*]} (needs root and apt-get); the real-Slurm selftest will be skipped"
    exit 0
fi
missing=()
for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} = 0 ]; then
    say "already installed: ${PACKAGES[*]} ($(dpkg-query -W -f='${Version}' slurm-wlm))"
    exit 0
fi
say "installing ${missing[*]} with apt-get (about a minute)"
log=$(mktemp /tmp/cs336-apt-slurm.XXXXXX.log)
export DEBIAN_FRONTEND=noninteractive
if apt-get -o DPkg::Lock::Timeout=300 update -q >"$log" 2>&1 &&
   apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
    say "installed ${missing[*]} ($(dpkg-query -W -f='${Version}' slurm-wlm)); apt-get's log: $log"
    exit 0
fi
say "apt-get could not install ${missing[*]}; the real-Slurm selftest will not run. Last lines of $log:"
tail -n 15 "$log" | sed 's/^/    /'
exit 1
