"""Static checks of deploy/docker/Dockerfile: no Docker engine runs here.

The Dockerfile is parsed instruction by instruction and checked against the repository
and Bazel's own view of it: the stages refer to stages that exist for every VARIANT,
everything it copies from the build context exists and is let through by its
.dockerignore, it copies every directory the binaries' build reads (from a genquery of
their BUILD and .bzl files plus WORKSPACE), the targets it builds are the image's
cc_binary targets and the files it collects are their outputs, and the builder installs
the build packages of scripts/setup. collect_runtime.sh is run for real on the binaries.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unittest

ARGS = None


def read(path):
    with open(path) as handle:
        return handle.read()


class Instruction:
    def __init__(self, keyword, rest, line):
        self.keyword = keyword
        self.rest = rest
        self.line = line

    def __repr__(self):
        return "line %d: %s %s" % (self.line, self.keyword, self.rest)


def parse_dockerfile(text):
    """Instructions with continuation lines joined and comments dropped."""
    instructions = []
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # A comment inside a continued instruction.
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        pending += stripped
        keyword, _, rest = pending.partition(" ")
        instructions.append(Instruction(keyword.upper(), rest.strip(), start))
        pending = ""
    if pending:
        raise AssertionError("the Dockerfile ends inside a continued instruction")
    return instructions


class Stage:
    def __init__(self, base, name, line):
        self.base = base
        self.name = name
        self.line = line
        self.instructions = []


def stages_of(instructions):
    stages = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            words = instruction.rest.split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            if len(words) not in (1, 3):
                raise AssertionError("cannot parse %r" % instruction)
            stages.append(Stage(words[0], name, instruction.line))
        elif stages:
            stages[-1].instructions.append(instruction)
    return stages


def copy_sources(instruction):
    """(--from value or None, [sources], destination) of a COPY."""
    words = shlex.split(instruction.rest)
    source_stage = None
    while words and words[0].startswith("--"):
        flag = words.pop(0)
        if flag.startswith("--from="):
            source_stage = flag.split("=", 1)[1]
    return source_stage, words[:-1], words[-1]


def global_args(instructions):
    """ARGs declared before the first FROM, with their defaults."""
    values = {}
    for instruction in instructions:
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG":
            name, _, default = instruction.rest.partition("=")
            values[name] = default.strip('"')
    return values


def bazel_build_targets(run):
    """Targets of the `bazel ... build ...` command in a RUN line."""
    command = run.split("&&")[0]
    words = command.split()
    if "bazel" not in words or "build" not in words:
        return []
    return [w for w in words[words.index("build") + 1:] if w.startswith("//")]


class DockerfileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.text = read(ARGS.dockerfile)
        cls.instructions = parse_dockerfile(cls.text)
        cls.stages = stages_of(cls.instructions)
        cls.named = {stage.name: stage for stage in cls.stages if stage.name}
        cls.args = global_args(cls.instructions)
        cls.variants = sorted(name[len("runtime-"):] for name in cls.named
                              if name.startswith("runtime-") and name != "runtime-base")
        # cc_binary rule //pkg:name
        cls.binaries = re.findall(r"^(\w+) rule (//\S+)$", read(ARGS.binaries_kind), flags=re.M)
        cls.build_files = read(ARGS.build_files).split()

    def resolve(self, base, variant):
        expanded = base
        for name, default in self.args.items():
            value = variant if name == "VARIANT" else default
            expanded = expanded.replace("${%s}" % name, value).replace("$" + name, value)
        return expanded

    def test_parses_with_a_syntax_directive_and_debian_12(self):
        self.assertTrue(self.text.startswith("# syntax=docker/dockerfile:1"))
        self.assertEqual(self.args["VARIANT"], "cpu")
        self.assertEqual(self.args["BUILDER_IMAGE"], "debian:12")
        self.assertEqual(self.args["RUNTIME_IMAGE"], "debian:12-slim")
        self.assertTrue(self.args["CUDA_IMAGE"].startswith("nvidia/cuda:"))
        self.assertRegex(self.args["CUDA_IMAGE"], r"-devel-")
        known = {"FROM", "RUN", "COPY", "ARG", "ENV", "WORKDIR", "EXPOSE", "LABEL", "USER", "CMD"}
        for instruction in self.instructions:
            self.assertIn(instruction.keyword, known, instruction)

    def test_stage_names_are_unique_and_every_reference_exists_for_every_variant(self):
        names = [stage.name for stage in self.stages if stage.name]
        self.assertEqual(len(names), len(set(names)), names)
        self.assertEqual(self.variants, ["cpu", "cuda"])
        for variant in self.variants:
            seen = set()
            for stage in self.stages:
                base = self.resolve(stage.base, variant)
                if "$" in base:
                    self.fail("stage at line %d: unresolved base %s" % (stage.line, base))
                is_image = ":" in base or "/" in base
                self.assertTrue(is_image or base in seen,
                                "stage at line %d (%s) builds on %s, not an earlier stage" % (
                                    stage.line, variant, base))
                for instruction in stage.instructions:
                    if instruction.keyword == "COPY":
                        source_stage, _, _ = copy_sources(instruction)
                        if source_stage:
                            self.assertIn(source_stage, seen, instruction)
                if stage.name:
                    seen.add(stage.name)
        # The last stage is the image: the runtime of the chosen variant.
        self.assertEqual(self.stages[-1].base, "runtime-${VARIANT}")
        self.assertEqual(self.stages[-1].instructions, [])

    def context_copies(self):
        copies = []
        for stage in self.stages:
            for instruction in stage.instructions:
                if instruction.keyword == "COPY":
                    source_stage, sources, destination = copy_sources(instruction)
                    if source_stage is None:
                        copies += [(source, destination, instruction) for source in sources]
        return copies

    def test_every_path_copied_from_the_context_exists_and_passes_the_dockerignore(self):
        root = ARGS.workspace_root
        ignore = [line for line in read(ARGS.dockerignore).splitlines()
                  if line and not line.startswith("#")]
        self.assertEqual(ignore[0], "*", "the .dockerignore must allow-list: start with *")
        allowed = [line[1:].rstrip("/") for line in ignore[1:]]
        for line in ignore[1:]:
            self.assertTrue(line.startswith("!"), line)
        copies = self.context_copies()
        self.assertTrue(copies)
        for source, _, instruction in copies:
            path = source.rstrip("/")
            self.assertTrue(os.path.exists(os.path.join(root, path)),
                            "%r copies %s, which the repository lacks" % (instruction, source))
            self.assertIn(path, allowed, "%s is excluded by the .dockerignore" % path)
        self.assertEqual(sorted(allowed), sorted(s.rstrip("/") for s, _, _ in copies),
                         "the .dockerignore lets through what the Dockerfile does not copy")

    def test_it_copies_every_directory_the_binaries_build_reads(self):
        copied = {source.rstrip("/") for source, _, _ in self.context_copies()}
        needed = {"WORKSPACE", ".bazelrc", "BUILD.bazel"}
        for label in self.build_files:
            if label.startswith("//"):
                package = label[2:].split(":", 1)[0]
                if package:
                    needed.add(package.split("/")[0])
        workspace = read(os.path.join(ARGS.workspace_root, "WORKSPACE"))
        for path in re.findall(r'path = "([^"]+)"', workspace):
            needed.add(path.split("/")[0])
        for package in re.findall(r'load\("//([^:"]*)', workspace):
            needed.add(package.split("/")[0])
        self.assertIn("third_party", needed)
        self.assertEqual(needed - copied, set(), "the build reads these, the image lacks them")

    def test_it_builds_and_collects_exactly_the_image_binaries(self):
        self.assertTrue(self.binaries)
        for kind, label in self.binaries:
            self.assertEqual(kind, "cc_binary", label)
        expected = sorted(label for _, label in self.binaries)
        builds = [bazel_build_targets(i.rest) for i in self.instructions if i.keyword == "RUN"]
        builds = [targets for targets in builds if targets]
        self.assertEqual(len(builds), 1, "one bazel build step for both variants")
        self.assertEqual(sorted(builds[0]), expected)
        run = [i.rest for i in self.instructions
               if i.keyword == "RUN" and "collect_runtime.sh" in i.rest][0]
        collected = re.findall(r"bazel-bin/(\S+)", run.split("collect_runtime.sh", 1)[1])
        outputs = sorted("//%s:%s" % (os.path.dirname(path), os.path.basename(path))
                         for path in collected)
        self.assertEqual(outputs, expected)
        self.assertIn("${BAZEL_CONFIG}", run)
        self.assertIn('ENV BAZEL_CONFIG="--config=cuda"',
                      [str(i.keyword + " " + i.rest) for i in self.named["builder-cuda"].instructions])

    def test_the_cuda_variant_gets_the_toolkit_where_cuda_configure_looks(self):
        cuda = self.named["builder-cuda"]
        copies = [copy_sources(i) for i in cuda.instructions if i.keyword == "COPY"]
        self.assertIn(("cuda-toolkit", ["/toolkit/"], "/usr/local/cuda/"), copies)
        toolkit = " ".join(i.rest for i in self.named["cuda-toolkit"].instructions)
        for needed in ("readlink -f /usr/local/cuda", "nccl", "/toolkit/lib64", "/toolkit/include"):
            self.assertIn(needed, toolkit)
        cpu = self.named["builder-cpu"]
        self.assertFalse([i for i in cpu.instructions if "cuda" in i.rest and i.keyword == "COPY"])

    def test_the_builder_installs_the_build_packages_of_scripts_setup(self):
        setup = read(ARGS.setup)
        block = re.search(r"packages=\(\n(.*?)\n\)", setup, flags=re.S).group(1)
        build = re.search(r"# Build\n(.*?)\n\s*#", block, flags=re.S).group(1).split()
        self.assertIn("bazel-bootstrap", build)
        install = [i.rest for i in self.named["builder"].instructions
                   if i.keyword == "RUN" and "apt-get install" in i.rest][0]
        for package in build:
            self.assertIn(package, install.split(), "the builder lacks %s" % package)

    def test_the_runtime_is_debian_slim_with_a_non_root_user(self):
        base = self.named["runtime-base"]
        self.assertEqual(self.resolve(base.base, "cpu"), "debian:12-slim")
        text = " ".join(i.keyword + " " + i.rest for i in base.instructions)
        self.assertIn("COPY --from=build /rootfs/ /", text)
        self.assertIn("--uid 10001", text)
        self.assertIn("RUN ldconfig", text)
        for variant in self.variants:
            users = [i.rest for i in self.named["runtime-" + variant].instructions
                     if i.keyword == "USER"]
            self.assertEqual(users, ["10001"], variant)
        exposed = [i.rest for i in base.instructions if i.keyword == "EXPOSE"][0].split()
        self.assertEqual(sorted(exposed), sorted(["50051", "8080", "50061", "8081", "50071",
                                                  "8082"]))


class CollectRuntimeTest(unittest.TestCase):
    """collect_runtime.sh, run on the real binaries."""

    GLIBC = re.compile(r"^(libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl)\.so|"
                       r"^libnss_|^ld-linux")

    def test_collects_the_binaries_and_every_library_they_load(self):
        dest = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        binaries = [ARGS.coordinator, ARGS.parameter_server, ARGS.worker, ARGS.cli]
        result = subprocess.run(["/bin/sh", ARGS.collect, dest] + binaries,
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        for binary in binaries:
            copied = os.path.join(dest, "usr/local/bin", os.path.basename(binary))
            self.assertTrue(os.access(copied, os.X_OK), copied)
        libdir = os.path.join(dest, "usr/local/lib/tributary")
        self.assertEqual(read(os.path.join(dest, "etc/ld.so.conf.d/tributary.conf")).strip(),
                         "/usr/local/lib/tributary")
        have = set(os.listdir(libdir))
        for binary in binaries:
            listing = subprocess.run(["ldd", binary], capture_output=True, text=True,
                                     check=True).stdout
            for name, path in re.findall(r"^\s*(\S+) => (/\S+)", listing, flags=re.M):
                if self.GLIBC.search(name):
                    self.assertNotIn(name, have)
                else:
                    self.assertIn(name, have, "%s needs %s (%s)" % (binary, name, path))
        for name in ("libgrpc++.so.1.51", "libprotobuf.so.32", "libglog.so.1"):
            self.assertIn(name, have)

    def test_refuses_a_missing_binary(self):
        dest = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        result = subprocess.run(["/bin/sh", ARGS.collect, dest, "/nonexistent/coordinator"],
                                capture_output=True, text=True)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("/nonexistent/coordinator is not an executable file", result.stderr)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    for name in ("dockerfile", "dockerignore", "collect", "binaries_kind", "build_files",
                 "setup", "workspace", "coordinator", "parameter_server", "worker", "cli"):
        parser.add_argument("--" + name, required=True)
    ARGS, rest = parser.parse_known_args()
    # The WORKSPACE runfile links to the source tree: its directory is the build context.
    ARGS.workspace_root = os.path.dirname(os.path.realpath(ARGS.workspace))
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
