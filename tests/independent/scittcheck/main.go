// scittcheck verifies the scitt/ files of a histaudit bundle with third-party code only:
// COSE_Sign1 and COSE_Key from github.com/veraison/go-cose, RFC 9162 proofs from
// github.com/transparency-dev/merkle, the checkpoint note from golang.org/x/mod/sumdb/note.
// Nothing here comes from histaudit: it reads what docs/scitt.md says the files hold.
//
//	scittcheck BUNDLE_DIR KEY.cose_key
//
// KEY.cose_key is the trusted key (an OKP Ed25519 COSE_Key whose kid is the histaudit
// key id). For every scitt/entries/*.cose: the statement's signature, then each receipt
// in its unprotected header (394): vds 1 in the protected header, the inclusion proof of
// SHA-256(0x00 || payload) in vdp (396) key -1 leads to a root, the receipt's signature
// verifies over that root (detached payload), the size the receipt signs (protected
// "histaudit-tree-size") is the proof's, and the checkpoint note it carries opens with
// the key and names the same size and root. scitt/entries/*.receipt must be one of
// those receipts. scitt/capsules/N.cose: the same, the leaf being the payload of
// scitt/entries/N.cose. scitt/consistency/*.receipt: vdp key -2 proves the tree of the
// carried new note extends the carried earlier note's. Prints one line per file and
// exits 1 if any fails.
package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fxamacker/cbor/v2"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/veraison/go-cose"
	"golang.org/x/mod/sumdb/note"
)

const (
	labelReceipts   = int64(394)
	labelVDS        = int64(395)
	labelVDP        = int64(396)
	labelCheckpoint = "histaudit-checkpoint"
	labelFrom       = "histaudit-checkpoint-from"
	labelTreeSize   = "histaudit-tree-size"
)

type checker struct {
	kid      []byte
	pub      ed25519.PublicKey
	verifier cose.Verifier
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: scittcheck BUNDLE_DIR KEY.cose_key")
		os.Exit(2)
	}
	c, err := loadKey(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "key:", err)
		os.Exit(2)
	}
	root := filepath.Join(os.Args[1], "scitt")
	failed, counts := 0, map[string]int{}
	report := func(kind, file string, err error) {
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", file, err)
			return
		}
		counts[kind]++
		fmt.Printf("ok %s\n", file)
	}
	leaves := map[string][]byte{}
	entries, _ := filepath.Glob(filepath.Join(root, "entries", "*.cose"))
	for _, f := range sorted(entries) {
		payload, n, err := c.statement(f, nil)
		if err == nil {
			leaves[strings.TrimSuffix(filepath.Base(f), ".cose")] = payload
		}
		counts["receipt"] += n
		report("statement", f, err)
	}
	alone, _ := filepath.Glob(filepath.Join(root, "entries", "*.receipt"))
	for _, f := range sorted(alone) {
		leaf, ok := leaves[strings.TrimSuffix(filepath.Base(f), ".receipt")]
		if !ok {
			report("receipt", f, errors.New("its statement did not verify"))
			continue
		}
		data, err := os.ReadFile(f)
		if err == nil {
			err = c.receipt(data, leaf)
		}
		report("receipt", f, err)
	}
	capsules, _ := filepath.Glob(filepath.Join(root, "capsules", "*.cose"))
	for _, f := range sorted(capsules) {
		leaf, ok := leaves[strings.TrimSuffix(filepath.Base(f), ".cose")]
		if !ok {
			report("capsule", f, errors.New("no verified statement of its leaf"))
			continue
		}
		_, n, err := c.statement(f, leaf)
		counts["receipt"] += n
		report("capsule", f, err)
	}
	cons, _ := filepath.Glob(filepath.Join(root, "consistency", "*.receipt"))
	for _, f := range sorted(cons) {
		report("consistency", f, c.consistency(f))
	}
	fmt.Printf("%d statements, %d receipts, %d capsules, %d consistency receipts verified; %d failed\n",
		counts["statement"], counts["receipt"], counts["capsule"], counts["consistency"], failed)
	if failed > 0 || counts["statement"] == 0 {
		os.Exit(1)
	}
}

func sorted(files []string) []string {
	sort.Slice(files, func(i, j int) bool { return num(files[i]) < num(files[j]) })
	return files
}

func num(f string) int {
	n, _ := strconv.Atoi(strings.SplitN(filepath.Base(f), ".", 2)[0])
	return n
}

func loadKey(path string) (*checker, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var key cose.Key
	if err := key.UnmarshalCBOR(data); err != nil {
		return nil, err
	}
	pub, err := key.PublicKey()
	if err != nil {
		return nil, err
	}
	edPub, ok := pub.(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("not an Ed25519 key")
	}
	verifier, err := cose.NewVerifier(cose.AlgorithmEdDSA, edPub)
	if err != nil {
		return nil, err
	}
	return &checker{kid: key.ID, pub: edPub, verifier: verifier}, nil
}

// signed decodes a COSE_Sign1 and checks that its protected header names the trusted key.
func (c *checker) signed(data []byte) (*cose.Sign1Message, error) {
	var msg cose.Sign1Message
	if err := msg.UnmarshalCBOR(data); err != nil {
		return nil, err
	}
	kid, _ := msg.Headers.Protected[cose.HeaderLabelKeyID].([]byte)
	if !bytes.Equal(kid, c.kid) {
		return nil, fmt.Errorf("kid %q is not the trusted key's %q", kid, c.kid)
	}
	return &msg, nil
}

// statement verifies a signed statement and every receipt it carries; the receipts prove
// wantLeaf, or the statement's own payload when wantLeaf is nil. It returns the payload
// and how many receipts verified.
func (c *checker) statement(file string, wantLeaf []byte) ([]byte, int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, 0, err
	}
	msg, err := c.signed(data)
	if err != nil {
		return nil, 0, err
	}
	if err := msg.Verify(nil, c.verifier); err != nil {
		return nil, 0, fmt.Errorf("statement signature: %w", err)
	}
	leaf := wantLeaf
	if leaf == nil {
		leaf = msg.Payload
	}
	list, _ := msg.Headers.Unprotected[labelReceipts].([]any)
	if len(list) == 0 {
		return nil, 0, errors.New("no receipt (unprotected label 394)")
	}
	for i, r := range list {
		raw, ok := r.([]byte)
		if !ok {
			return nil, i, errors.New("a receipt is not a byte string")
		}
		if err := c.receipt(raw, leaf); err != nil {
			return nil, i, fmt.Errorf("receipt %d: %w", i, err)
		}
	}
	return msg.Payload, len(list), nil
}

// proofOf returns the one proof under vdp key `label` as [a, b, [hashes]].
func proofOf(msg *cose.Sign1Message, label int64) (uint64, uint64, [][]byte, error) {
	if vds, _ := msg.Headers.Protected[labelVDS].(int64); vds != 1 {
		return 0, 0, nil, errors.New("protected vds (395) is not 1, RFC9162_SHA256")
	}
	if msg.Payload != nil {
		return 0, 0, nil, errors.New("the receipt's payload is attached, not detached")
	}
	vdp, _ := msg.Headers.Unprotected[labelVDP].(map[any]any)
	proofs, _ := vdp[label].([]any)
	if len(proofs) != 1 {
		return 0, 0, nil, fmt.Errorf("vdp (396) key %d does not hold one proof", label)
	}
	raw, _ := proofs[0].([]byte)
	var p struct {
		_    struct{} `cbor:",toarray"`
		A, B uint64
		Path [][]byte
	}
	if err := cbor.Unmarshal(raw, &p); err != nil {
		return 0, 0, nil, fmt.Errorf("proof: %w", err)
	}
	// RFC 9942 signs the root only; the signed size (a protected header) must be the one
	// the proof folds with: inclusion [size, index, path], consistency [old, new, path].
	size := p.A
	if label == -2 {
		size = p.B
	}
	if signed, _ := msg.Headers.Protected[labelTreeSize].(int64); signed < 0 || uint64(signed) != size {
		return 0, 0, nil, fmt.Errorf("the proof's tree size %d is not the signed %d", size, signed)
	}
	return p.A, p.B, p.Path, nil
}

// openNote opens a checkpoint note signed by the trusted key, returning size and root.
func (c *checker) openNote(text []byte) (uint64, []byte, error) {
	origin, _, _ := strings.Cut(string(text), "\n")
	vkey, err := note.NewEd25519VerifierKey(origin, c.pub)
	if err != nil {
		return 0, nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return 0, nil, err
	}
	n, err := note.Open(text, note.VerifierList(v))
	if err != nil {
		return 0, nil, fmt.Errorf("checkpoint note: %w", err)
	}
	lines := strings.Split(n.Text, "\n")
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		return 0, nil, err
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	return size, root, err
}

func (c *checker) receipt(data, leaf []byte) error {
	msg, err := c.signed(data)
	if err != nil {
		return err
	}
	size, index, path, err := proofOf(msg, -1)
	if err != nil {
		return err
	}
	hasher := rfc6962.DefaultHasher
	root, err := proof.RootFromInclusionProof(hasher, index, size, hasher.HashLeaf(leaf), path)
	if err != nil {
		return fmt.Errorf("inclusion proof: %w", err)
	}
	msg.Payload = root
	if err := msg.Verify(nil, c.verifier); err != nil {
		return fmt.Errorf("receipt signature over the rebuilt root: %w", err)
	}
	text, _ := msg.Headers.Unprotected[labelCheckpoint].([]byte)
	noteSize, noteRoot, err := c.openNote(text)
	if err != nil {
		return err
	}
	if noteSize != size || !bytes.Equal(noteRoot, root) {
		return fmt.Errorf("the checkpoint note signs size %d, the proof is for %d", noteSize, size)
	}
	return nil
}

func (c *checker) consistency(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	msg, err := c.signed(data)
	if err != nil {
		return err
	}
	size1, size2, path, err := proofOf(msg, -2)
	if err != nil {
		return err
	}
	oldText, _ := msg.Headers.Unprotected[labelFrom].([]byte)
	newText, _ := msg.Headers.Unprotected[labelCheckpoint].([]byte)
	oldSize, oldRoot, err := c.openNote(oldText)
	if err != nil {
		return err
	}
	newSize, newRoot, err := c.openNote(newText)
	if err != nil {
		return err
	}
	if oldSize != size1 || newSize != size2 {
		return fmt.Errorf("the notes sign sizes %d and %d, the proof is from %d to %d", oldSize, newSize, size1, size2)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, size1, size2, path, oldRoot, newRoot); err != nil {
		return fmt.Errorf("consistency proof: %w", err)
	}
	msg.Payload = newRoot
	if err := msg.Verify(nil, c.verifier); err != nil {
		return fmt.Errorf("receipt signature over the newer root: %w", err)
	}
	return nil
}
