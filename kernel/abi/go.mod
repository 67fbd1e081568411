module github.com/wasmkeep/wasmkeep/kernel/abi

go 1.24
