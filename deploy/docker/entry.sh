#!/bin/sh
# bpslaunch, bpsrun and byteps in the container: runs the command its name (argv[0]) names.
case "$(basename "$0")" in
  bpslaunch) exec python3 -m byteps.launcher.bpslaunch "$@" ;;
  bpsrun) exec python3 -m byteps.launcher.bpsrun "$@" ;;
  byteps) exec python3 -m byteps.cli "$@" ;;
  *) echo "byteps-entry: run as bpslaunch, bpsrun or byteps (a link named so), not as $0" >&2; exit 2 ;;
esac
