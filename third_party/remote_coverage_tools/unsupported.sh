#!/usr/bin/env bash
echo "bazel coverage is not supported in Tributary's offline build (no coverage tools)" >&2
exit 1
