// Package wasmkeep is the Go SDK for WasmKeep actors: WebAssembly modules,
// built with standard Go for GOOS=wasip1, that WasmKeep runs one per actor
// address, each with its own SQLite database.
//
// An actor registers its hooks from an init function (a module built with
// -buildmode=c-shared never runs main) and leaves main empty:
//
//	func init() {
//		wasmkeep.OnInit(func() error {
//			_, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS visits (who TEXT NOT NULL)")
//			return err
//		})
//		wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
//			...
//		})
//	}
//
//	func main() {}
//
// Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o actor.wasm .
//
// The HTTP types follow net/http without importing it, and the storage calls
// follow database/sql, to keep every actor small. The functions that call the
// host (Exec, Query, Self, ...) exist only for GOOS=wasip1; the types build
// everywhere, so the pure parts can be tested with plain go test.
//
// docs/abi.md is the ABI this package implements.
package wasmkeep
