/**
 * "Did you mean …?" for a misspelled name, the way commander suggests a misspelled flag: the
 * candidates at the smallest edit distance (Damerau-Levenshtein, optimal string alignment), at
 * most 3 edits away and more than 40 % alike. Pure.
 */

const MAX_DISTANCE = 3;
const MIN_SIMILARITY = 0.4;

/** Edits (insert, delete, substitute, swap two neighbours) between `a` and `b`. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = [];
  for (let i = 0; i <= a.length; i++) d[i] = [i];
  for (let j = 0; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/** The closest candidates to `word`, sorted; none when nothing is close. */
export function similarNames(word: string, candidates: Iterable<string>): string[] {
  let best = MAX_DISTANCE;
  let similar: string[] = [];
  for (const c of new Set(candidates)) {
    if (c.length <= 1 || c === word) continue;
    const distance = editDistance(word, c);
    const length = Math.max(word.length, c.length);
    if ((length - distance) / length <= MIN_SIMILARITY) continue;
    if (distance < best) {
      best = distance;
      similar = [c];
    } else if (distance === best) similar.push(c);
  }
  return similar.sort();
}

/** `; did you mean stripe?`, `; did you mean one of a, b?`, or '' . */
export function didYouMean(word: string, candidates: Iterable<string>): string {
  const s = similarNames(word, candidates);
  if (s.length === 0) return '';
  return s.length === 1 ? `; did you mean ${s[0]}?` : `; did you mean one of ${s.join(', ')}?`;
}
