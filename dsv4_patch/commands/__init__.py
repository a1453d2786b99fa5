"""The commands layer, one module per command (pre-commit's `commands/` layout): each function
takes a Project and the command's options and returns data; none prints. `dsv4_patch.api` names
them all, as the cli (tools/) and the tests call them.

Each command imports what it needs when it runs: a no-op `apply` should not pay for lint, regress,
export or pin (and their imports) on every start. A module here imports another only for a
function it calls (`regress --record` exports the trees it records).
"""
