#!/bin/sh
# Start llama-server with the flags the project's settings give (python -m hsi_dagster.llm.argv).
#
# The API key comes from the docker secret /run/secrets/llama_api_key (or LLAMA_API_KEY_FILE) when present:
# llama-server reads that file itself (--api-key-file), so the key is never on a command line or in the
# environment. Without the file, LLAMA_API_KEY from .env is handed over through an in-memory file.
# Extra arguments are passed to the argv builder (e.g. `--print` to show the command instead of running it).
set -eu

secret_file="${LLAMA_API_KEY_FILE:-/run/secrets/llama_api_key}"
unset LLAMA_API_KEY_FILE

if [ -f "$secret_file" ]; then
    if [ ! -r "$secret_file" ]; then
        echo "error: LLAMA_API_KEY_FILE: $secret_file is not readable by uid $(id -u)" >&2
        exit 2
    fi
    if [ -s "$secret_file" ]; then
        set -- --api-key-file "$secret_file" "$@"
    fi
fi

case " $* " in
    *" --print "*) exec python3 -m hsi_dagster.llm.argv "$@" ;;
    *) exec python3 -m hsi_dagster.llm.argv --exec "$@" ;;
esac
