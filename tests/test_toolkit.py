import os
import stat

from kbench.system import toolkit


def _toolkit(root):
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (root / "include" / "cuda_runtime.h").write_text("")
    return root


def test_cuda_home_from_the_environment(tmp_path, monkeypatch):
    root = _toolkit(tmp_path / "cuda-x")
    monkeypatch.setenv("CUDA_HOME", str(root))
    assert toolkit.find_cuda_home() == root


def test_a_wrapper_nvcc_is_followed_to_the_real_toolkit(tmp_path, monkeypatch):
    """An nvcc script on PATH (like /usr/local/bin/nvcc) is no toolkit; its symlink target is."""
    root = _toolkit(tmp_path / "real")
    bindir = tmp_path / "wrapbin"
    bindir.mkdir()
    (bindir / "nvcc").symlink_to(root / "bin" / "nvcc")
    (root / "bin" / "nvcc").chmod(stat.S_IRWXU)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(bindir))
    found = toolkit.find_cuda_home()
    assert found is not None
    assert found == root or toolkit._is_toolkit(found)  # /usr/local/cuda wins where it exists


def test_a_folder_without_headers_is_not_a_toolkit(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    assert not toolkit._is_toolkit(tmp_path)


def test_arch_list_prefers_the_environment_then_the_gpu(monkeypatch):
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    assert toolkit.arch_list((8, 6)) == "8.6"
    assert toolkit.arch_list(None) == toolkit.DEFAULT_ARCH
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    assert toolkit.arch_list((8, 6)) == "8.0;9.0"


def test_cache_key_changes_with_everything_that_changes_the_binary():
    base = toolkit.cache_key(b"src", "2.11", "9.0")
    assert base == toolkit.cache_key(b"src", "2.11", "9.0")
    assert len({base, toolkit.cache_key(b"src2", "2.11", "9.0"), toolkit.cache_key(b"src", "2.12", "9.0"),
                toolkit.cache_key(b"src", "2.11", "8.0")}) == 4


def test_build_env_points_the_child_at_its_own_cache(tmp_path):
    env = toolkit.build_env(tmp_path / "k", tmp_path / "cuda", "9.0", 2)
    assert env["TORCH_EXTENSIONS_DIR"] == str(tmp_path / "k")
    assert (env["CUDA_HOME"], env["TORCH_CUDA_ARCH_LIST"], env["MAX_JOBS"]) == (str(tmp_path / "cuda"), "9.0", "2")
    assert "CUDA_HOME" not in toolkit.build_env(tmp_path, None, "9.0", 1)
    assert os.environ.get("TORCH_EXTENSIONS_DIR") != str(tmp_path / "k")


def test_the_first_compiler_error_is_the_line_a_person_looks_for_with_its_folder_dropped():
    from kbench.judge.candidate.loading import first_error_line
    from kbench.system.toolkit import first_compiler_error

    log = "\n".join([
        "[1/3] c++ -MMD -Werror=return-type -c main.cpp -o main.o",
        "FAILED: cuda.cuda.o",
        "/tmp/torch_extensions/ext/cuda.cu(42): error: identifier \"tile\" is undefined",
        "/tmp/torch_extensions/ext/cuda.cu(43): error: expected a \";\"",
        "RuntimeError: Error building extension 'ext'",
    ])
    assert first_compiler_error(log) == 'cuda.cu(42): error: identifier "tile" is undefined'
    assert first_compiler_error("ninja: no work to do.") is None
    # the import's message (a compile_error verdict) and the build's come from the same function
    assert first_error_line(log) == first_compiler_error(log)
    assert first_error_line("ImportError: undefined symbol: _Z3foov") == "ImportError: undefined symbol: _Z3foov"
