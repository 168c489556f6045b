// What the console's forms repeat, written once: a field with its visible label and its error next to
// it (tied by aria-describedby), a form that posts with the session's CSRF token, a form-level error.
// Pages still write their own markup where a form is unusual (New fax, the per-row forms of a table).
import type { SessionUser } from '../../auth/console-users.ts';
import { html, type Html } from './html.ts';
import { csrfField, describedBy, fieldError } from './layout.ts';

export interface FieldSpec {
  /** The element's id (also its error's, `<id>-error`). */
  id: string;
  name: string;
  label: string;
  type?: 'text' | 'email' | 'tel' | 'url' | 'date' | 'datetime-local';
  value?: string | undefined;
  required?: boolean;
  placeholder?: string;
  maxlength?: number;
  /** A short help text under the field. */
  hint?: string;
  error?: string | undefined;
}

/** A labelled text input with its error (if any) next to it. */
export function field(f: FieldSpec): Html {
  return html`<label for="${f.id}">${f.label}</label
    ><input
      id="${f.id}"
      name="${f.name}"
      type="${f.type ?? 'text'}"
      value="${f.value ?? ''}"
      ${f.required ? html` required` : ''}${f.placeholder ? html` placeholder="${f.placeholder}"` : ''}${
        f.maxlength ? html` maxlength="${f.maxlength}"` : ''
      }${describedBy(f.id, f.error)}
    />${f.hint ? html`<p class="hint">${f.hint}</p>` : ''}${fieldError(f.id, f.error)}`;
}

/** A labelled select; `options` are [value, text] pairs. */
export function select(f: {
  id: string;
  name: string;
  label: string;
  options: readonly (readonly [string, string])[];
  value?: string | undefined;
  error?: string | undefined;
}): Html {
  return html`<label for="${f.id}">${f.label}</label
    ><select id="${f.id}" name="${f.name}" ${describedBy(f.id, f.error)}>
      ${f.options.map(([v, t]) => html`<option value="${v}" ${v === f.value ? html` selected` : ''}>${t}</option>`)}</select
    >${fieldError(f.id, f.error)}`;
}

/** A form-level error (one no field names), announced when the page loads. */
export function formError(msg: string | undefined): Html {
  return msg ? html`<p class="alert" role="alert">${msg}</p>` : html``;
}

/**
 * A form posting to `action` with the session's CSRF token, its fields and one submit button.
 * `inline` for a one-button form inside a table row; `label` names the button for a screen reader
 * when its text alone is ambiguous ("Delete" of which row).
 */
export function postForm(
  u: SessionUser,
  action: string,
  submit: string,
  fields: Html | readonly Html[] = [],
  o: { inline?: boolean; button?: 'primary' | 'secondary' | 'danger'; label?: string } = {},
): Html {
  const cls = o.button === undefined || o.button === 'primary' ? '' : o.button;
  return html`<form ${o.inline ? html`class="inline" ` : ''}method="post" action="${action}">
    ${csrfField(u)}${fields}<button
      ${cls ? html`class="${cls}" ` : ''}type="submit"
      ${o.label ? html` aria-label="${o.label}"` : ''}
    >
      ${submit}
    </button>
  </form>`;
}

/** A labelled multi-line text field with its error next to it. */
export function textarea(f: Omit<FieldSpec, 'type' | 'placeholder'> & { rows?: number }): Html {
  return html`<label for="${f.id}">${f.label}</label
    ><textarea
      id="${f.id}"
      name="${f.name}"
      rows="${f.rows ?? 3}"
      ${f.required ? html` required` : ''}${f.maxlength ? html` maxlength="${f.maxlength}"` : ''}${describedBy(
        f.id,
        f.error,
      )}
    >
${f.value ?? ''}</textarea
    >${f.hint ? html`<p class="hint">${f.hint}</p>` : ''}${fieldError(f.id, f.error)}`;
}
