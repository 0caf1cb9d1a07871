#!/usr/bin/env bash
# The slurm.conf lines that scripts/slurm-up.sh (one node) and scripts/twonode.sh (two nodes)
# share: what works on these machines as root, without systemd or cgroups (ENVIRONMENT.md).
# Sourced; `slurm_settings` prints them, `slurm_install` installs Debian's packages if missing.
slurm_settings() {
  cat <<'CONF'
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
SchedulerParameters=nohold_on_prolog_fail
KillWait=5
MinJobAge=30
CONF
}

slurm_install() {
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends \
      slurmctld slurmd slurm-client munge libpmix2 libpmix-dev >/dev/null
  fi
}
