package vault

import (
	"context"
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/store"
)

// rotatePage is how many secrets a rotation pass reads at a time.
const rotatePage = 100

// maxRotatePasses bounds Rotate: each pass rewraps what the previous ones left (secrets sealed meanwhile by a
// server still on an older primary key).
const maxRotatePasses = 5

// RotateResult says what Rotate did.
type RotateResult struct {
	Rewrapped int // data keys now wrapped under the primary key
	Remaining int // secrets still wrapped under another key (rewritten concurrently on every pass)
}

// Rotate rewraps every data key that is not wrapped under v's primary key, one conditional update per secret:
// a secret rewritten or deleted while it is rewrapped is left alone (and picked up by the next pass if it is
// still under an old key). Ciphertexts are untouched, and a reader holding either key keeps reading every
// secret throughout: the old wrapping stays valid until the row is replaced by the new one.
func Rotate(ctx context.Context, st Store, v *Vault) (RotateResult, error) {
	var res RotateResult
	for range maxRotatePasses {
		n, left, err := rotatePass(ctx, st, v)
		res.Rewrapped += n
		res.Remaining = left
		if err != nil || left == 0 {
			return res, err
		}
	}
	return res, nil
}

// rotatePass rewraps one pass over the secrets, the credentials' and the session resources' (repository
// tokens), then those kept in records (deployments' tokens, webhook signing secrets), and returns how many it
// rewrapped and how many it could not.
func rotatePass(ctx context.Context, st Store, v *Vault) (rewrapped, left int, err error) {
	for _, resources := range []bool{false, true} {
		n, l, err := rotateTable(ctx, st, v, resources)
		rewrapped, left = rewrapped+n, left+l
		if err != nil {
			return rewrapped, left, err
		}
	}
	n, l, err := rotateRecords(ctx, st, v)
	return rewrapped + n, left + l, err
}

// rotateTable is rotatePass over the credentials' secrets, or the session resources'.
func rotateTable(ctx context.Context, st Store, v *Vault, resources bool) (rewrapped, left int, err error) {
	p := &store.SecretListParams{NotKeyIDs: []string{v.primary.id}, Limit: rotatePage, Resources: resources}
	for {
		page, err := st.SecretList(ctx, p)
		if err != nil {
			return rewrapped, left, fmt.Errorf("vault: rotate: list secrets: %w", err)
		}
		for i := range page {
			s := &page[i]
			nw, err := v.Rewrap(s)
			if err != nil {
				return rewrapped, left, fmt.Errorf("vault: rotate %s/%s: %w", s.CredentialID, s.Name, err)
			}
			err = st.SecretRewrap(ctx, &store.SecretRewrapParams{CredentialID: s.CredentialID, Name: s.Name,
				OldKeyID: s.KeyID, OldWrappedKey: s.WrappedKey, KeyID: nw.KeyID, WrappedKey: nw.WrappedKey, Resources: resources})
			switch {
			case err == nil:
				rewrapped++
			case errors.Is(err, store.ErrNotFound):
				// Deleted meanwhile: nothing to rewrap.
			case errors.Is(err, store.ErrConflict):
				left++ // rewritten meanwhile; the next pass sees its new wrapping
			default:
				return rewrapped, left, fmt.Errorf("vault: rotate %s/%s: %w", s.CredentialID, s.Name, err)
			}
		}
		if len(page) < rotatePage {
			return rewrapped, left, nil
		}
		last := page[len(page)-1]
		p.AfterCredentialID, p.AfterName = last.CredentialID, last.Name
	}
}
