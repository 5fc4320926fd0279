#!/usr/bin/env bash
# Lock the staff files of an installed kit to root: run by the Gradescope setup.sh, as root,
# after the smoke-test grade. Student code runs as unprivileged uids in this image, so nothing
# they can read may name a hidden test or hold the hidden seed:
#   - the hidden tests: folders 0711 (pytest, after dropping privileges, still stats them), files 0600;
#   - the smoke grade's results (every hidden test's name), the per-course seed, the test timing
#     table, the manifest (its weights name hidden tests), the threat model (it names the attack fixtures), the
#     fixtures, selftests, tools, peer checks, GPU checks and their records, benchmarks and the
#     reference: root only.
# The virtual environment stays world-readable (the executors run its interpreter).
set -euo pipefail
KIT=${1:?usage: lock_down.sh KIT}
cd "$KIT"
chmod -R a+rX .venv
find autograder/hidden_tests -type d -exec chmod 711 {} +
find autograder/hidden_tests -type f -exec chmod 600 {} +
for folder in results reference fixtures autograder/selftests autograder/tools autograder/peer_checks \
              gpu_checks records benchmarks; do
    if [ -e "$folder" ]; then chmod -R go-rwx "$folder"; fi
done
for file in autograder/hidden_seed autograder/manifest.toml autograder/test_durations.toml autograder/README.md \
            autograder/part2_contracts.md \
            confine/THREAT_MODEL.md; do
    if [ -e "$file" ]; then chmod 600 "$file"; fi
done
echo "[gradescope] staff files locked to root"
