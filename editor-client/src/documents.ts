/**
 * Which documents the ksearch server is attached to.  Pure data (no `vscode` import) so a unit
 * test can check it against package.json's language contributions and activation events.
 */

/** File extensions of kernel sources; `cpp`-mode documents count only when their name ends so. */
export const KERNEL_EXTENSIONS = [".cu", ".cuh", ".metal"];

/** Language ids whose files the server analyses. */
export const LANGUAGES = ["cuda-cpp", "cuda", "metal", "cpp", "python"];

export interface DocumentFilter {
  scheme: string;
  language: string;
  pattern?: string;
}

/** The language client's document selector: files on disk only (accept writes them). */
export const DOCUMENT_SELECTOR: DocumentFilter[] = LANGUAGES.map((language) =>
  language === "cpp"
    ? { scheme: "file", language, pattern: `**/*.{${KERNEL_EXTENSIONS.map((e) => e.slice(1)).join(",")}}` }
    : { scheme: "file", language },
);
