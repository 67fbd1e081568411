module github.com/wasmkeep/wasmkeep/sdk/go

go 1.24

require github.com/wasmkeep/wasmkeep/kernel/abi v0.0.0-00010101000000-000000000000

// The ABI's encoding, shared with the host, from the same checkout.
replace github.com/wasmkeep/wasmkeep/kernel/abi => ../../kernel/abi
