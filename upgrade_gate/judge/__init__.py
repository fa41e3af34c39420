"""Judge stage: diff, change plan, policy, rules, verdict. Pure: no I/O beyond loading documents."""
