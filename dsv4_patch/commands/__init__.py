"""The commands layer, one module per command (pre-commit's `commands/` layout): the commands take a
Project and the command's options and return data; none prints. Callers import them from
`dsv4_patch.api`, which names them all (this package re-exports nothing: `commands.apply` is the
module).

Each command imports what it needs when it runs: a no-op `apply` should not pay for lint, regress,
export or pin (and their imports) on every start. A module here imports another only for a
function it calls (`regress --record` exports the trees it records).
"""
