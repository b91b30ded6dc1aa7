module histaudit.test/scittcheck

go 1.26.0

require (
	github.com/fxamacker/cbor/v2 v2.10.0
	github.com/transparency-dev/merkle v0.0.2
	github.com/veraison/go-cose v1.3.0
	golang.org/x/mod v0.43.0
)

require github.com/x448/float16 v0.8.4 // indirect
