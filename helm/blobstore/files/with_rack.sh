#!/bin/sh
# Run a command with `--rack <rack>` appended, the rack read from a file (written by the
# bookie pod's init container, node_rack.py): with_rack.sh FILE COMMAND [ARG...]
set -eu
rack_file=$1
shift
rack=$(cat "$rack_file")
exec "$@" --rack "$rack"
