//===- RunTool.cpp - Running the linker and ptxas -------------------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The compile paths run two external tools: the system linker (CPU bundles)
// and ptxas (cubins). The JIT runs them inside applications, on any thread,
// so the wait must not touch process-wide state: no alarm(), no signal
// handlers, no wait() for any child (see runTool in CompilerSupport.h).
//
//===----------------------------------------------------------------------===//

#include "CompilerSupport.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <time.h>
#include <vector>

extern char **environ;

namespace {
/// The environment the tools run in: a copy of the process's, taken when
/// the library loads (before an application's threads, or under Python's
/// import lock). posix_spawn read the live `environ`, which another
/// thread's setenv reallocates while a compile runs (Python releases the
/// GIL for it, and `os.environ[k] = v` calls putenv): "cannot run
/// /usr/bin/ld.lld: Bad address" in a quarter of the links.
struct ToolEnvironment {
  std::vector<std::string> strings;
  std::vector<char *> pointers;
  ToolEnvironment() {
    for (char **e = environ; e && *e; ++e)
      strings.emplace_back(*e);
    for (std::string &s : strings)
      pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
};
const ToolEnvironment toolEnvironment;
} // namespace

llvm::Expected<int> kiln::detail::runTool(llvm::ArrayRef<llvm::StringRef> args,
                                          llvm::StringRef outputPath,
                                          unsigned timeoutSeconds) {
  std::vector<std::string> strings(args.begin(), args.end());
  std::vector<char *> argv;
  for (std::string &s : strings)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  std::string out = outputPath.str();

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(),
                       const_cast<char *const *>(toolEnvironment.pointers.data()));
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return makeError("cannot run " + strings[0] + ": " + std::strerror(rc));

  // Poll this pid (WNOHANG), sleeping 0.1 ms at first and at most 5 ms
  // (a link takes tens of milliseconds); a signal only wakes the sleep.
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::seconds(timeoutSeconds);
  long sleepNs = 100000;
  int status = 0;
  for (;;) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid)
      break;
    if (done < 0 && errno != EINTR)
      return makeError("waiting for " + strings[0] + ": " + std::strerror(errno));
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return makeError(strings[0] + " ran past " + std::to_string(timeoutSeconds) +
                       " seconds and was stopped");
    }
    timespec ts{0, sleepNs};
    nanosleep(&ts, nullptr);
    sleepNs = std::min(sleepNs * 2, 5000000L);
  }
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return makeError(strings[0] + " was killed by signal " +
                   std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0));
}

namespace {
using kiln::detail::makeError;

/// The temporary files of one tool run, removed when it goes out of scope.
class ToolFiles {
public:
  ToolFiles() = default;
  ToolFiles(const ToolFiles &) = delete;
  ToolFiles &operator=(const ToolFiles &) = delete;
  ~ToolFiles() {
    for (const std::string &path : paths)
      llvm::sys::fs::remove(path);
  }

  /// A new file in the temporary directory holding `contents`, its path.
  llvm::Expected<std::string> create(llvm::StringRef suffix,
                                     llvm::StringRef contents = {}) {
    llvm::SmallString<128> path;
    int fd;
    if (std::error_code ec =
            llvm::sys::fs::createTemporaryFile("kiln", suffix, fd, path))
      return makeError("cannot create a temporary file: " + ec.message());
    paths.push_back(path.str().str());
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << contents;
    os.close();
    if (os.has_error()) {
      std::error_code ec = os.error();
      os.clear_error(); // (else its destructor is a fatal error)
      return makeError("cannot write the temporary file " + path + ": " +
                       ec.message());
    }
    return paths.back();
  }

private:
  std::vector<std::string> paths;
};
} // namespace

llvm::Expected<std::string> kiln::detail::runToolOnFile(
    llvm::StringRef what, llvm::StringRef input, llvm::StringRef inSuffix,
    llvm::StringRef outSuffix,
    llvm::function_ref<llvm::SmallVector<llvm::StringRef>(llvm::StringRef,
                                                          llvm::StringRef)>
        args,
    unsigned timeoutSeconds) {
  ToolFiles files;
  llvm::Expected<std::string> in = files.create(inSuffix, input);
  if (!in)
    return in.takeError();
  llvm::Expected<std::string> out = files.create(outSuffix);
  if (!out)
    return out.takeError();
  llvm::Expected<std::string> log = files.create("log");
  if (!log)
    return log.takeError();
  llvm::Expected<int> rc = runTool(args(*in, *out), *log, timeoutSeconds);
  std::string messages;
  if (auto buf = llvm::MemoryBuffer::getFile(*log); buf && (*buf)->getBufferSize())
    messages = "\n" + (*buf)->getBuffer().str();
  if (!rc)
    return makeError(what + " failed: " + llvm::toString(rc.takeError()) + messages);
  if (*rc != 0)
    return makeError(what + " failed with exit status " + std::to_string(*rc) +
                     messages);
  auto buf = llvm::MemoryBuffer::getFile(*out);
  if (!buf)
    return makeError("cannot read the output of " + what);
  // (A linker that exited 0 without writing gave a bundle the runtime
  // refused, after kilnc reported success.)
  if ((*buf)->getBufferSize() == 0)
    return makeError(what + " exited 0 but wrote nothing" + messages);
  return (*buf)->getBuffer().str();
}
