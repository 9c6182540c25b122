#!/bin/sh
# Copies binaries and every shared library they load into a root-filesystem tree for the
# runtime image: binaries to DEST/usr/local/bin, libraries to DEST/usr/local/lib/tributary
# (registered with the dynamic loader through DEST/etc/ld.so.conf.d/tributary.conf).
# glibc's own libraries are left out: the runtime base image has them, matching its loader.
#
#   collect_runtime.sh DEST BINARY...
set -eu

if [ $# -lt 2 ]; then
  echo "usage: collect_runtime.sh DEST BINARY..." >&2
  exit 2
fi
dest=$1
shift
libdir=/usr/local/lib/tributary
mkdir -p "$dest/usr/local/bin" "$dest$libdir" "$dest/etc/ld.so.conf.d"
echo "$libdir" > "$dest/etc/ld.so.conf.d/tributary.conf"

for binary in "$@"; do
  if [ ! -x "$binary" ]; then
    echo "collect_runtime.sh: $binary is not an executable file" >&2
    exit 1
  fi
  install -m 0755 "$binary" "$dest/usr/local/bin/"
  # ldd lines: "libfoo.so.1 => /path/libfoo.so.1 (0x...)", or "=> not found".
  missing=$(ldd "$binary" | awk '$3 == "not" {print $1}')
  if [ -n "$missing" ]; then
    echo "collect_runtime.sh: $binary needs libraries the loader cannot find: $missing" >&2
    exit 1
  fi
  for library in $(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'); do
    case "$(basename "$library")" in
      libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
      libutil.so.* | libanl.so.* | libnss_*.so.* | ld-linux*.so.*) continue ;;
    esac
    # -L: the file itself under the name the binary asks for (its soname).
    cp -L "$library" "$dest$libdir/$(basename "$library")"
  done
  echo "collect_runtime.sh: $(basename "$binary") and its libraries collected"
done
count=$(find "$dest$libdir" -type f | wc -l)
echo "collect_runtime.sh: $count shared libraries in $libdir"
