#!/usr/bin/env python3
"""Compares the device code of two builds, function by function.

Each side is one or more cubins, host objects (.o, whose .nv_fatbin holds the cubins; fatbins
compressed with nvcc's --compress-mode are not read) or static libraries (.a) of such objects;
separate the sides with `--`. For every function of every cubin (every `.text.<name>` section:
kernels and non-inlined device functions) it compares the machine code bytes (what `cuobjdump
-sass` disassembles), the relocations (by symbol name), the register count, the static shared
memory, the parameter bank size and the kernel attributes (.nv.info, symbol indices as names).
Names are compared after normalising the anonymous namespace, whose mangled form
(`<len>_GLOBAL__N__<hash>_<len>_<file>_<hash>`) names the translation unit: a kernel that moves
to another .cu file keeps its identity. Line tables and other debug sections are not compared.

Prints one row per function (status, bytes, registers, demangled name where c++filt exists) and
exits 1 on any difference or on a function present on one side only, 0 when all are identical,
2 on unreadable input.
  usage: compare_sass.py [--quiet] BEFORE... -- AFTER...
"""
import hashlib
import re
import shutil
import struct
import subprocess
import sys

ANON = re.compile(r'(\d+)_GLOBAL__N_')
STO_CUDA_ENTRY = 0x10
# .nv.info attributes whose first word is a symbol index (EIATTR_PARAM_CBANK, EIATTR_FRAME_SIZE,
# EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE, EIATTR_REGCOUNT); the cubin-wide .nv.info keeps a
# function's register count and stack sizes under its symbol index.
SYM_ATTRS = {0x0a, 0x11, 0x12, 0x23, 0x2f}


class BadInput(Exception):
    pass


def norm_name(name):
    """Replaces each anonymous namespace (its length-prefixed mangled component) by `_GLOBAL__N_1`."""
    out, i = [], 0
    while True:
        m = ANON.search(name, i)
        if not m:
            out.append(name[i:])
            return ''.join(out)
        n = int(m.group(1))
        start = m.start(1) + len(m.group(1))
        out.append(name[i:m.start()] + '12_GLOBAL__N_1')
        i = start + n


def elf_sections(d, what):
    if d[:4] != b'\x7fELF' or d[4] != 2 or d[5] != 1:
        raise BadInput(f'{what}: not a 64-bit little-endian ELF')
    shoff = struct.unpack_from('<Q', d, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', d, 0x3a)
    secs = []
    for i in range(shnum):
        name, typ, flags, _addr, off, size, link, info, _al, entsize = struct.unpack_from('<IIQQQQIIQQ', d, shoff + i * shentsize)
        secs.append(dict(name_off=name, type=typ, flags=flags, off=off, size=size, link=link, info=info, entsize=entsize))
    so = secs[shstrndx]['off']
    for s in secs:
        s['name'] = d[so + s['name_off']:d.index(b'\0', so + s['name_off'])].decode()
        s['data'] = d[s['off']:s['off'] + s['size']] if s['type'] != 8 else b''  # SHT_NOBITS
    return secs


def cubins_of_fatbin(fb, what):
    out, pos = [], 0
    while pos + 16 <= len(fb):
        magic, _ver, hsize, fsize = struct.unpack_from('<IHHQ', fb, pos)
        if magic != 0xBA55ED50:
            break
        e, end = pos + hsize, pos + hsize + fsize
        while e < end:
            kind, _v, ehsize, psize = struct.unpack_from('<HHIQ', fb, e)
            payload = fb[e + ehsize:e + ehsize + psize]
            if kind == 2:  # ELF (cubin)
                if payload[:4] != b'\x7fELF':
                    raise BadInput(f'{what}: compressed cubin in the fatbin (rebuild with nvcc --no-compress, or pass .cubin files)')
                out.append(payload)
            e += ehsize + psize
        pos = end
    return out


def cubins_of_file(path):
    d = open(path, 'rb').read()
    if d[:8] == b'!<arch>\n':  # static library: its members, GNU long names or not
        out, pos = [], 8
        while pos + 60 <= len(d):
            size = int(d[pos + 48:pos + 58].decode().strip())
            member = d[pos + 60:pos + 60 + size]
            if member[:4] == b'\x7fELF':
                out += cubins_in_elf(member, path)
            pos += 60 + size + (size & 1)
        return out
    return cubins_in_elf(d, path)


def cubins_in_elf(d, what):
    secs = elf_sections(d, what)
    if struct.unpack_from('<H', d, 0x12)[0] == 190:  # EM_CUDA: a cubin itself
        return [d]
    out = []
    for s in secs:
        if s['name'] == '.nv_fatbin':
            out += cubins_of_fatbin(s['data'], what)
    return out


def functions(cubin, what):
    secs = elf_sections(cubin, what)
    symtab = next((s for s in secs if s['type'] == 2), None)
    syms = []
    if symtab:
        strd = secs[symtab['link']]['data']
        for i in range(symtab['size'] // 24):
            nm, info, other, shndx, _v, _sz = struct.unpack_from('<IBBHQQ', symtab['data'], i * 24)
            syms.append((strd[nm:strd.index(b'\0', nm)].decode(), info, other, shndx))
    symname = lambda i: norm_name(syms[i][0] or secs[syms[i][3]]['name']) if i < len(syms) else f'#{i}'
    by_name = {s['name']: s for s in secs}
    funcs = {}
    for s in secs:
        if not s['name'].startswith('.text.'):
            continue
        raw = s['name'][len('.text.'):]
        name = norm_name(raw)
        entry = any(sy[0] == raw and sy[2] & STO_CUDA_ENTRY for sy in syms)
        rel = []
        for rs in (by_name.get('.rel.text.' + raw), by_name.get('.rela.text.' + raw)):
            if not rs:
                continue
            esz = 24 if rs['type'] == 4 else 16
            for k in range(rs['size'] // esz):
                off, inf = struct.unpack_from('<QQ', rs['data'], k * esz)
                add = struct.unpack_from('<q', rs['data'], k * esz + 16)[0] if esz == 24 else 0
                rel.append((off, inf & 0xffffffff, symname(inf >> 32), add))
        ni = by_name.get('.nv.info.' + raw)
        info = [(attr, val) for _sym, attr, val in nv_info(ni['data'] if ni else b'', symname)]
        shared = by_name.get('.nv.shared.' + raw)
        const0 = by_name.get('.nv.constant0.' + raw)
        funcs[name] = dict(kernel=entry, code=s['data'], regs=0, flags=s['flags'], rel=rel, info=info, glob=[],
                           shared=shared['size'] if shared else 0, const0=const0['size'] if const0 else 0)
    ni = by_name.get('.nv.info')
    for sym, attr, val in nv_info(ni['data'] if ni else b'', symname):
        if sym in funcs:
            funcs[sym]['glob'].append((attr, val))
            if attr == 0x2f and len(val) >= 4:
                funcs[sym]['regs'] = struct.unpack_from('<I', val)[0]
    return funcs


def nv_info(d, symname):
    """(symbol name or None, attribute, value) per .nv.info record; symbol indices become names."""
    out, k = [], 0
    while k + 2 <= len(d):
        fmt, attr = d[k], d[k + 1]
        if fmt == 0x04:  # EIFMT_SVAL: 16-bit size, then the value
            n = struct.unpack_from('<H', d, k + 2)[0]
            val, sym = d[k + 4:k + 4 + n], None
            if attr in SYM_ATTRS and n >= 4:
                sym, val = symname(struct.unpack_from('<I', val)[0]), val[4:]
            out.append((sym, attr, val))
            k += 4 + n
        else:  # EIFMT_NVAL / BVAL / HVAL: a 16-bit value
            out.append((None, attr, d[k + 2:k + 4]))
            k += 4
    return out


def collect(paths):
    out = {}
    for p in paths:
        cubins = cubins_of_file(p)
        if not cubins:
            raise BadInput(f'{p}: no cubin found')
        for c in cubins:
            for name, f in functions(c, p).items():
                if name in out and out[name]['code'] != f['code']:
                    raise BadInput(f'{p}: two different functions named {name}')
                out[name] = f
    return out


def diff(a, b):
    why = []
    if a['code'] != b['code']:
        why.append(f'code ({len(a["code"])} vs {len(b["code"])} bytes)')
    for key, label in (('regs', 'registers'), ('flags', 'section flags'), ('shared', 'shared memory'),
                       ('const0', 'parameter bank'), ('rel', 'relocations'), ('info', 'attributes'),
                       ('glob', 'stack sizes')):
        if a[key] != b[key]:
            why.append(label)
    return ', '.join(why)


def demangle(names):
    if not names or not shutil.which('c++filt'):
        return {n: n for n in names}
    r = subprocess.run(['c++filt'], input='\n'.join(names), capture_output=True, text=True)
    lines = r.stdout.splitlines()
    return dict(zip(names, lines)) if r.returncode == 0 and len(lines) == len(names) else {n: n for n in names}


def main(argv):
    quiet = '--quiet' in argv
    argv = [a for a in argv if a != '--quiet']
    if '--' not in argv or argv.index('--') == 0 or argv.index('--') == len(argv) - 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    k = argv.index('--')
    try:
        A, B = collect(argv[:k]), collect(argv[k + 1:])
    except (BadInput, OSError, ValueError, struct.error, IndexError) as e:
        print(f'compare_sass.py: error: {e}', file=sys.stderr)
        return 2
    names = sorted(set(A) | set(B))
    dm = demangle(names)
    bad = 0
    kernels = sum(1 for n in names if (A.get(n) or B.get(n))['kernel'])
    for n in names:
        a, b = A.get(n), B.get(n)
        if a and b:
            why = diff(a, b)
            status = 'DIFFERS: ' + why if why else 'identical'
        else:
            why, status = 'one side', 'only in ' + ('before' if a else 'after')
        bad += bool(why)
        f = a or b
        if not quiet or why:
            sha = hashlib.sha256(f['code']).hexdigest()[:12]
            kind = 'kernel' if f['kernel'] else 'device fn'
            print(f'{status:<12} {kind:<9} {len(f["code"]):>8} B {f["regs"]:>3} regs  sha256 {sha}  {dm[n]}')
    print(f'{len(names)} functions ({kernels} kernels): {len(names) - bad} identical, {bad} different or missing')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
