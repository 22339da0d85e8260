//! The latest values of a series in a fixed ring ([`Ring`]): a price's recent estimates
//! (`prices::Recent`), a service's gaps between synchronisations ([`super::rhythm`]).
use std::cmp::Ordering;

/// The latest `N` values pushed (each new one past `N` overwrites the oldest), held without
/// allocation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ring<T, const N: usize> {
    values: [T; N],
    len: usize,
    next: usize,
}

impl<T: Copy + Default, const N: usize> Default for Ring<T, N> {
    fn default() -> Self {
        Ring {
            values: [T::default(); N],
            len: 0,
            next: 0,
        }
    }
}

impl<T: Copy, const N: usize> Ring<T, N> {
    pub(super) fn push(&mut self, x: T) {
        self.values[self.next] = x;
        self.next = (self.next + 1) % N;
        self.len = (self.len + 1).min(N);
    }

    /// How many it holds (at most `N`).
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// What it holds, sorted by `cmp`: the first [`Ring::len`] of the array.
    pub(super) fn sorted(&self, cmp: impl FnMut(&T, &T) -> Ordering) -> [T; N] {
        let mut v = self.values;
        v[..self.len].sort_by(cmp);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_keeps_the_latest_n_and_sorts_only_what_it_holds() {
        let mut r = Ring::<u64, 3>::default();
        r.push(9);
        r.push(4);
        assert_eq!(r.len(), 2);
        assert_eq!(&r.sorted(u64::cmp)[..2], &[4, 9]);
        for x in [7, 1, 5] {
            r.push(x);
        }
        assert_eq!(r.len(), 3);
        assert_eq!(r.sorted(u64::cmp), [1, 5, 7], "9 and 4 were overwritten");
    }
}
