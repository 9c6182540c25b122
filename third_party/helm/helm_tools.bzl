"""Helm and kubectl for the chart tests, from the setup script's cache folder.

scripts/setup unpacks static helm (v3.17) and kubectl binaries into
%workspace%/.cache/tools/ (git-ignored). This rule links them into a repository with
the targets @helm_tools//:helm and @helm_tools//:kubectl. Nothing is downloaded here.

When a binary is missing at fetch time, its target is a small script that runs the
binary if it has appeared since (scripts/setup ran after Bazel fetched this
repository) and otherwise fails with "run scripts/setup": a test that needs Helm then
fails loudly instead of being skipped.
"""

_TOOLS = ["helm", "kubectl"]

_MISSING = """#!/bin/sh
# {name} was not in {path} when Bazel fetched @helm_tools.
if [ -x "{path}" ]; then exec "{path}" "$@"; fi
echo "{name} not found at {path}: run scripts/setup (it installs helm and kubectl there)" >&2
exit 1
"""

def _helm_tools_impl(ctx):
    workspace = ctx.path(Label("@//:WORKSPACE")).dirname
    tools = workspace.get_child(".cache").get_child("tools")
    for name in _TOOLS:
        binary = tools.get_child(name)
        if binary.exists:
            ctx.symlink(binary, name)
        else:
            ctx.file(name, _MISSING.format(name = name, path = str(binary)), executable = True)
    ctx.file("BUILD.bazel", "\n".join([
        'package(default_visibility = ["//visibility:public"])',
        "",
        "exports_files(%s)" % repr(_TOOLS),
        "",
    ]))
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)

helm_tools = repository_rule(
    implementation = _helm_tools_impl,
    local = True,
)
