module github.com/meshnode/meshnode

go 1.26

require (
	github.com/fxamacker/cbor/v2 v2.5.0 // indirect
	github.com/veraison/go-cose v1.3.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
)
