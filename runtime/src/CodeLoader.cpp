//===- CodeLoader.cpp - Load a bundle's ELF code section
//-------------------===//
//
// The code is loaded by the system's dynamic loader rather than a custom one:
// relocation, TLS and unwinding then behave like any shared object. dlopen
// needs a path, so the bytes go to an anonymous memfd (no file system
// writes, nothing left behind on a crash) or, where memfd_create is missing,
// to a temporary file that is unlinked right after dlopen.
//
// The ELF header and program headers are checked before dlopen because the
// loader trusts them: a PT_LOAD segment reaching past the end of the file is
// mapped anyway and faults (SIGBUS) when touched.
//
//===----------------------------------------------------------------------===//

#include "CodeLoader.h"
#include "DeviceAssert.h"
#include "Status.h"

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace kiln::rt {

namespace {

kiln_status checkElf(const uint8_t *code, size_t size) {
  Elf64_Ehdr ehdr;
  if (size < sizeof(ehdr))
    return makeStatus(KILN_ERROR_LOAD,
                      "code section is %zu bytes, too small for an ELF "
                      "header",
                      size);
  std::memcpy(&ehdr, code, sizeof(ehdr)); // The section may be unaligned.
  if (std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0)
    return makeStatus(KILN_ERROR_LOAD, "code section is not an ELF file");
  if (ehdr.e_ident[EI_CLASS] != ELFCLASS64 ||
      ehdr.e_ident[EI_DATA] != ELFDATA2LSB)
    return makeStatus(KILN_ERROR_LOAD,
                      "code section is not a 64-bit little-endian ELF file");
  if (ehdr.e_machine != EM_X86_64)
    return makeStatus(KILN_ERROR_LOAD,
                      "code section is ELF for machine %u, not x86-64 (%u)",
                      unsigned(ehdr.e_machine), unsigned(EM_X86_64));
  if (ehdr.e_type != ET_DYN)
    return makeStatus(KILN_ERROR_LOAD,
                      "code section is ELF type %u, not a shared object",
                      unsigned(ehdr.e_type));
  if (ehdr.e_phentsize != sizeof(Elf64_Phdr) || ehdr.e_phnum == 0 ||
      ehdr.e_phoff > size ||
      (size - ehdr.e_phoff) / sizeof(Elf64_Phdr) < ehdr.e_phnum)
    return makeStatus(KILN_ERROR_LOAD,
                      "code section: ELF program headers lie outside the "
                      "code");
  bool anyLoad = false;
  for (unsigned i = 0; i < ehdr.e_phnum; ++i) {
    Elf64_Phdr phdr;
    std::memcpy(&phdr, code + ehdr.e_phoff + i * sizeof(Elf64_Phdr),
                sizeof(phdr));
    if (phdr.p_type != PT_LOAD)
      continue;
    anyLoad = true;
    if (phdr.p_offset > size || phdr.p_filesz > size - phdr.p_offset)
      return makeStatus(KILN_ERROR_LOAD,
                        "code section: ELF segment %u [%" PRIu64 ", +%" PRIu64
                        ") lies outside the %zu-byte code",
                        i, uint64_t(phdr.p_offset), uint64_t(phdr.p_filesz),
                        size);
  }
  if (!anyLoad)
    return makeStatus(KILN_ERROR_LOAD,
                      "code section: ELF file has no loadable segment");
  return nullptr;
}

bool writeAll(int fd, const uint8_t *data, size_t size) {
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

std::string dlErrorMessage() {
  const char *message = dlerror();
  return message ? message : "unknown dynamic loader error";
}

/// Loads through a memfd. Returns false (and leaves `status` null) when this
/// route is unavailable, so that the caller falls back to a temporary file.
bool tryLoadFromMemfd(const uint8_t *code, size_t size, LoadedCode &out,
                      kiln_status &status) {
  status = nullptr;
#if defined(__linux__) && defined(MFD_CLOEXEC)
  // Testing knob: exercise the fallback on systems that do have memfd.
  const char *disable = std::getenv("KILN_LOADER_NO_MEMFD");
  if (disable && *disable && std::strcmp(disable, "0") != 0)
    return false;
  int fd = memfd_create("kiln-kernel", MFD_CLOEXEC);
  if (fd < 0)
    return false;
  // glibc matches already-loaded libraries by path, and fd numbers are
  // reused: a library loaded as /proc/self/fd/N would be returned for the
  // next memfd numbered N. The fd was held open while its library lived,
  // one per loaded kernel, and a process with about a thousand kernels ran
  // out of descriptors (EMFILE, for its own files too). Instead each load
  // spells the path uniquely: this load's number in binary as no-op path
  // components between fd/ and N ("./" a 1, "/" a 0: a prefix-free code,
  // so no two loads share a spelling), and the fd is closed after dlopen
  // (the mapping keeps the memfd's contents).
  static std::atomic<uint64_t> loads{0};
  uint64_t id = loads.fetch_add(1, std::memory_order_relaxed);
  std::string path = "/proc/self/fd/";
  for (int bit = 63; bit >= 0; --bit)
    if (id >> bit)
      path += (id >> bit) & 1 ? "./" : "/";
  path += std::to_string(fd);
  // Without /proc (some containers) the memfd cannot be named.
  if (!writeAll(fd, code, size) || ::access(path.c_str(), R_OK) != 0) {
    ::close(fd);
    return false;
  }
  // (A spelling already loaded, by code outside the runtime: the file.)
  if (void *stale = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    dlclose(stale);
    ::close(fd);
    return false;
  }
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ::close(fd);
  if (!handle) {
    status = makeStatus(KILN_ERROR_LOAD, "dlopen of kernel code failed: %s",
                        dlErrorMessage().c_str());
    return true;
  }
  out.handle = handle;
  return true;
#else
  (void)code;
  (void)size;
  (void)out;
  return false;
#endif
}

kiln_status loadFromTempFile(const uint8_t *code, size_t size,
                             LoadedCode &out) {
  const char *dir = std::getenv("TMPDIR");
  if (!dir || !*dir)
    dir = "/tmp";
  std::string path = std::string(dir) + "/kiln-kernel-XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0)
    return makeStatus(KILN_ERROR_LOAD,
                      "cannot create a temporary file in %s for kernel "
                      "code: %s",
                      dir, std::strerror(errno));
  bool written = writeAll(fd, code, size);
  int writeErrno = errno;
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    return makeStatus(KILN_ERROR_LOAD, "cannot write kernel code to %s: %s",
                      path.c_str(), std::strerror(writeErrno));
  }
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string error = handle ? std::string() : dlErrorMessage();
  // The mapping keeps the contents alive; the name is not needed any more.
  ::unlink(path.c_str());
  if (!handle)
    return makeStatus(KILN_ERROR_LOAD, "dlopen of kernel code failed: %s",
                      error.c_str());
  out.handle = handle;
  return nullptr;
}

} // namespace

kiln_status loadElfCode(const uint8_t *code, size_t size,
                        const std::string &entrySymbol, LoadedCode &out) {
  out = LoadedCode();
  if (kiln_status status = checkElf(code, size))
    return status;

  kiln_status status = nullptr;
  if (!tryLoadFromMemfd(code, size, out, status))
    status = loadFromTempFile(code, size, out);
  if (status)
    return status;

  dlerror(); // Clear, so a stale message is not reported below.
  void *symbol = dlsym(out.handle, entrySymbol.c_str());
  if (!symbol) {
    std::string error = dlErrorMessage();
    unloadCode(out);
    return makeStatus(KILN_ERROR_LOAD,
                      "kernel code does not export the entry symbol '%s': %s",
                      entrySymbol.c_str(), error.c_str());
  }
  // POSIX guarantees data and function pointers convert through dlsym.
  out.entry = reinterpret_cast<KernelFn>(symbol);
  // Emulated GPU kernels export the emulator's tensor-map encoder.
  out.tensorMapEncoder = dlsym(out.handle, "kiln_emu_tensormap_encode");
  out.embeddedManifest =
      static_cast<const char *>(dlsym(out.handle, "kiln_manifest"));
  // Kernels with kiln.assert call the runtime through this slot.
  if (void *hook = dlsym(out.handle, "kiln_assert_hook")) {
    void (*fn)(const char *, const char *, int32_t, int32_t, int32_t,
               int32_t) = &kilnAssertHook;
    uint64_t value = reinterpret_cast<uintptr_t>(fn);
    std::memcpy(hook, &value, sizeof value);
    out.hasAsserts = true;
  }
  dlerror();
  return nullptr;
}

void unloadCode(LoadedCode &code) {
  if (code.handle)
    dlclose(code.handle);
  code = LoadedCode();
}

} // namespace kiln::rt
